/**
 * Review 3: the write concern of writes that carry the caller's data. README ("Write concerns"):
 * "A release that carries an update (commit): at least majority, since it carries your data",
 * and the folded section at `w: 1` is safe "only when every effect of the section goes through
 * the commit (or through guard()ed writes at majority)". But:
 * `extend({ update })` carries data too, and is sent at the call's `w` (1 for a lock configured
 *   with `w: 1`, as the folded pattern invites), never raised to majority.
 */
import { expect } from 'chai';
import type { CommandStartedEvent, Document } from 'mongodb';
import { writeLock } from '../lib';
import { freshCollection, newClient } from './support/fixture';

describe('review 3 (fixed): the write concern of data-carrying lock writes', () => {
  it('extend({ update }) of a lock configured with w: 1 is sent at majority, like a commit', async function () {
    this.timeout(15_000);
    const collection = await freshCollection([{ _id: 1, step: 0 }]);
    const client = await newClient({ monitorCommands: true });
    const sent: CommandStartedEvent[] = [];
    client.on('commandStarted', (event) => sent.push(event));
    const jobs = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), w: 1 });
    const held = await jobs.acquire({ _id: 1 }, { document: true });
    sent.length = 0;
    await held.extend(10_000, { update: { $set: { step: 1 } } });
    await held.release({ update: { $set: { step: 2 } } });
    const concerns = sent
      .filter((event) => ['findAndModify', 'update'].includes(event.commandName))
      .map((event) => `${event.commandName} w:${String((event.command.writeConcern as Document | undefined)?.w)}`);
    expect(concerns).to.deep.equal(['findAndModify w:majority', 'update w:majority']);
  });
});
