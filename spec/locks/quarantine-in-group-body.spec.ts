/**
 * Review of the quarantine (issue 41 §3): a `usingAll()` body that returns `quarantine()` is refused
 * with a TypeError that names "`handle.quarantine()` on a member" as the way to quarantine one
 * document of a group. Taken as told, the mark lands and every lock ends, yet `usingAll()` rejects.
 */
import { expect } from 'chai';
import { usingAll, writeLock } from '../../lib';
import { freshCollection } from '../support/fixture';

describe('quarantine of a usingAll() member from its body', function () {
  this.timeout(30_000);

  it('a body that calls handle.quarantine() on a member (as the TypeError for returning quarantine() says) resolves its value', async () => {
    const collection = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const outcome = await usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], {}, async ([first]) => {
      await first!.quarantine({ reason: 'bad payload' });
      return 'done';
    }).then(
      (value) => `resolved ${value}`,
      (error: Error) => `${(error as { subtype?: string }).subtype ?? error.name}: ${error.message}`,
    );
    const docs = await collection.find({}, { sort: { _id: 1 } }).toArray();
    expect(docs.map((doc) => doc.lock?.quarantine?.reason ?? null), 'the mark landed on the member').to.deep.equal(['bad payload', null]);
    expect(docs.map((doc) => (doc.lock?.tags?.write ?? []).length), 'every lock ended').to.deep.equal([0, 0]);
    expect(outcome).to.equal('resolved done');
  });

  it('a body that goes on after quarantining a member, past its lease, is not aborted (the member is no longer kept) and resolves its value', async () => {
    const collection = await freshCollection([{ _id: 1 }, { _id: 2 }]);
    const lock = writeLock({ collection, locktimeout: 600 });
    let aborted = false;
    const outcome = await usingAll([{ lock, filter: { _id: 1 } }, { lock, filter: { _id: 2 } }], {}, async ([first], signal) => {
      await first!.quarantine({ reason: 'bad payload' });
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      aborted = signal.aborted;
      return 'done';
    }).then(
      (value) => `resolved ${value}`,
      (error: Error) => `${(error as { subtype?: string }).subtype ?? error.name}: ${error.message}`,
    );
    const docs = await collection.find({}, { sort: { _id: 1 } }).toArray();
    expect(docs.map((doc) => (doc.lock?.tags?.write ?? []).length), 'every lock ended').to.deep.equal([0, 0]);
    expect({ outcome, aborted }).to.deep.equal({ outcome: 'resolved done', aborted: false });
  });
});
