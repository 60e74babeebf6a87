/**
 * The driver retries a retryable write whose reply was lost and reports the retry's error; the
 * first attempt may have landed. Only an error that proves the command wrote nothing (its values
 * refused, its update refused by the document) may be reported as "nothing was written".
 * Simulated: the write is applied, then the retry's error is thrown (stress/server-faults.ts).
 */
import { expect } from 'chai';
import { MongoServerError } from 'mongodb';
import { writeLock } from '../../lib';
import { failingAfterLanding } from '../../stress/server-faults';
import { realNow } from '../support/clock';
import { freshCollection, rejectionOf, sleep } from '../support/fixture';

const retryError = (code: number, codeName: string) => (): MongoServerError => new MongoServerError({ ok: 0, code, codeName, errmsg: `${codeName} (simulated: the retry's answer)` });

describe('a retried write whose retry failed after the first attempt landed', () => {
  for (const [code, codeName] of [[462, 'IngressRequestRateLimitExceeded'], [13, 'Unauthorized'], [91, 'ShutdownInProgress'], [999_999, 'AnErrorThisLibraryDoesNotKnow']] as const) {
    it(`acquire, after ${code} ${codeName}: DbError with the lock it may hold, and that lock is released`, async function () {
      this.timeout(20_000);
      const raw = await freshCollection([{ _id: 'a' }]);
      const lock = writeLock({ collection: failingAfterLanding(raw, (method, _args, n) => method === 'findOneAndUpdate' && n === 1, retryError(code, codeName)), locktimeout: 30_000, timeout: 1_000 });
      const error = await rejectionOf(lock.acquire({ _id: 'a' }));
      expect(error.subtype).to.equal('DbError');
      expect(error.message).to.match(/may have been written/);
      expect(error.lock, 'err.lock').to.be.an('object');
      // The write landed: it is held by nobody until the library releases it (long before its 30 s lease).
      const deadline = realNow() + 5_000;
      const live = async (): Promise<number> => {
        const doc = await raw.findOne({ _id: 'a' as never });
        return ((doc?.lock?.tags?.write ?? []) as Array<{ exp: Date }>).filter((entry) => entry.exp.getTime() > realNow()).length;
      };
      expect((await raw.findOne({ _id: 'a' as never }))?.lock?.fence, 'the first attempt landed').to.equal(1);
      while ((await live()) > 0 && realNow() < deadline) await sleep(50);
      expect(await live(), 'released').to.equal(0);
      await (await lock.acquire({ _id: 'a' })).release();
    });
  }

  it('a v2 timestamp commit whose retry failed with 13 Unauthorized after it landed: applied unknown, never false', async () => {
    const raw = await freshCollection([{ _id: 'a', n: 0 }]);
    let failCommits = false;
    const lock = writeLock({
      collection: failingAfterLanding(raw, (method, args) => failCommits && method === 'updateOne' && '$inc' in ((args[1] ?? {}) as object), retryError(13, 'Unauthorized')),
      locktimeout: 30_000,
    });
    const handle = await lock.acquire({ _id: 'a' });
    failCommits = true;
    const error = await rejectionOf(lock.release({ _id: 'a' }, { timestamp: handle.timestamp, update: { $inc: { n: 1 } } }));
    expect(error.subtype).to.equal('DbError');
    expect((await raw.findOne({ _id: 'a' as never }))?.n, 'the commit landed').to.equal(1);
    expect((error.data as { applied?: unknown }).applied).to.equal('unknown');
  });

  it('an update the document refuses ($inc of a string: 14 TypeMismatch) is still reported as not applied', async () => {
    const raw = await freshCollection([{ _id: 'a', n: 'text' }]);
    const lock = writeLock({ collection: raw, locktimeout: 30_000 });
    const handle = await lock.acquire({ _id: 'a' });
    const error = await rejectionOf(lock.release({ _id: 'a' }, { timestamp: handle.timestamp, update: { $inc: { n: 1 } } }));
    expect((error.data as { applied?: unknown }).applied).to.equal(false);
    await handle.release();
  });
});
