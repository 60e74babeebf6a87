/**
 * A command's `$$NOW` is fixed when it starts; one blocked on the server (behind a transaction, a
 * prepare conflict, a full ticket queue) lands up to its `maxTimeMS` (the call's `timeout`) later,
 * while its caller may already have been told of a failure. The lock such an acquisition writes is
 * released, however late within that bound it lands. Simulated: the caller gets a network error at
 * once, and the command is applied later with `$$NOW` fixed when it was sent (stress/server-faults.ts).
 */
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { resourceLocks, semaphore, writeLock } from '../../lib';
import { landingLate, type LateLanding } from '../../stress/server-faults';
import { realNow } from '../support/clock';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';

const TIMEOUT = 1_000;
const LEASE = 20_000;

/** Unexpired lock entries in `collection`. */
async function liveEntries(collection: Collection<Document>): Promise<number> {
  const docs = await collection.find().toArray();
  return docs.flatMap((doc) => Object.values((doc.lock?.tags ?? {}) as Record<string, Array<{ exp: Date }>>).flat()).filter((entry) => entry.exp.getTime() > realNow()).length;
}

/** The first acquisition of `make`'s lock lands `lateBy` ms after its caller was told it failed; resolves once it landed and the library had until `timeout` + 1 s more. */
async function lateAcquisition(make: (collection: Collection<Document>) => () => Promise<unknown>, lateBy: number): Promise<{ raw: Collection<Document>; landed: LateLanding; error: Error & Record<string, unknown> }> {
  const raw = await freshCollection([{ _id: 'a' }]);
  const landed: LateLanding[] = [];
  const late = landingLate(raw, (method, args, n) => n === 1 && (method === 'findOneAndUpdate' || method === 'updateOne') && '$inc' in ((args[1] ?? {}) as object), lateBy, landed);
  const error = await rejectionOf(make(late)());
  const deadline = realNow() + lateBy + 2_000;
  while (landed[0]?.appliedAt === undefined && realNow() < deadline) await sleep(20);
  return { raw, landed: landed[0]!, error };
}

describe('an acquisition that lands after its caller was told it failed', () => {
  const kinds: Array<[string, (collection: Collection<Document>) => () => Promise<unknown>]> = [
    ['writeLock', (c) => () => writeLock({ collection: c, locktimeout: LEASE, timeout: TIMEOUT }).acquire({ _id: 'a' })],
    ['semaphore', (c) => () => semaphore({ collection: c, limit: 2, locktimeout: LEASE, timeout: TIMEOUT }).acquire({ _id: 'a' })],
    ['resource lock', (c) => () => resourceLocks({ collection: c, timeout: TIMEOUT }).xlock('a', 'holder', { ttl: LEASE })],
  ];
  for (const [name, make] of kinds) {
    it(`${name}: landing well after the cleanup's first release, within its timeout, it is still released`, async function () {
      this.timeout(30_000);
      // The stamp window is about 100 ms: its first release comes about then, and finds nothing.
      const { raw, landed, error } = await lateAcquisition(make, 700);
      expect(error.subtype).to.equal('DbError');
      expect(landed.appliedAt, 'the blocked command was applied').to.be.a('number');
      expect(landed.result, 'it matched and wrote its lock').to.be.an('object').with.property('_id', 'a');
      const deadline = realNow() + TIMEOUT + 3_000;
      while ((await liveEntries(raw)) > 0 && realNow() < deadline) await sleep(50);
      expect(await liveEntries(raw), 'released within the timeout and a few pauses, long before its lease').to.equal(0);
    });
  }
});
