/**
 * A group refused at a multiLock tag that is assertive over a tag still held: it holds nothing
 * (its registration was released), so its AssertiveLock must not hand back a registration to
 * continue (`err.lock`, "registered; waiting for tag …"): continuing it could only fail. Single
 * `acquire` with `wait` says the same thing truthfully: "still asserting …; released", no lock.
 */
import { expect } from 'chai';
import { acquireAll, multiLock, writeLock } from '../../lib';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('acquireAll: an assertive member refused says it holds nothing', function () {
  this.timeout(30_000);

  for (const wait of [0, 300]) {
    it(`wait ${wait}: AssertiveLock names its request, carries no released registration, and says it was released`, async () => {
      const docs = await freshCollection([{ _id: 1 }, { _id: 2 }]);
      const rw = multiLock({
        collection: docs,
        field: 'rw',
        locktimeouts: { read: 60_000, write: 60_000 },
        lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
      });
      const locks = writeLock({ collection: docs, locktimeout: 60_000 });
      const reader = await rw.acquire({ _id: 2 }, { tag: 'read' });
      const refused = await rejectionOf(acquireAll([{ lock: locks, filter: { _id: 1 } }, { lock: rw, tag: 'write', filter: { _id: 2 } }], { wait }));
      expect(refused.subtype).to.equal('AssertiveLock');
      expect(refused.request).to.equal(1);
      const writers = ((await docs.findOne({ _id: 2 as never }))!.rw.tags.write as unknown[]).length;
      expect(writers, 'the registration was released: the group holds nothing').to.equal(0);
      const continued = refused.lock === undefined ? 'no lock handed back' : await rw.acquire({ _id: 2 }, { tag: 'write', lock: refused.lock as never }).then(() => 'continued', (error: Error & { subtype?: string }) => error.subtype);
      expect(continued, `err.lock of "${refused.message}"`).to.equal('no lock handed back');
      expect(refused.message).not.to.match(/registered; waiting/);
      await reader.release();
    });
  }
});
