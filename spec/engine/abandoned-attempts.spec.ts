/**
 * An acquisition attempt still waiting for one of its client's command slots when its call is
 * abandoned (its signal aborts, a promise library's cancel) is not sent: it would take a lock nobody
 * wants, and a cleanup release after it, at the moment the client is congested.
 */
import { expect } from 'chai';
import type { Collection, CommandStartedEvent, Document } from 'mongodb';
import { resourceLocks, writeLock } from '../../lib';
import { commandGateOf } from '../../lib/engine/command-gate';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { isAcquisition, liveEntries, whatAnAcquisitionGets } from '../support/lock-commands';

/**
 * A client with one slot of lock commands (maxPoolSize 1) on a fresh collection with `docs`: its
 * first acquisition's reply comes 600 ms late (`slow`, the collection to lock); `sent` lists the
 * filters of the findAndModify commands it sent.
 */
async function oneSlotClient(docs: Document[]): Promise<{ shared: Collection<Document>; slow: Collection<Document>; sent: Document[]; close(): Promise<void> }> {
  const client = await newClient({ monitorCommands: true, maxPoolSize: 1 });
  const shared = await freshCollection(docs);
  const collection = client.db(shared.dbName).collection(shared.collectionName);
  const sent: Document[] = [];
  client.on('commandStarted', (event: CommandStartedEvent) => {
    if (event.commandName === 'findAndModify') sent.push(event.command.query as Document);
  });
  let acquisitions = 0;
  const slow = delayedCollection(collection, { reply: (method, _n, args) => (isAcquisition(method, args) && ++acquisitions === 1 ? 600 : 0) });
  return { shared, slow, sent, close: () => client.close() };
}

/** Starts `busy` (it takes the slot), then `wanted` with a signal once it waits for the slot, aborts it, and lets `busy` end: resolves `wanted`'s rejection. */
async function abortWhileQueued(collection: Collection<Document>, busy: () => Promise<{ release(): Promise<unknown> }>, wanted: (signal: AbortSignal) => Promise<unknown>): Promise<Error> {
  const gate = commandGateOf(collection);
  const holding = busy();
  for (let i = 0; i < 500 && gate.inFlight < 1; i++) await sleep(5);
  const controller = new AbortController();
  const waiting = wanted(controller.signal);
  for (let i = 0; i < 500 && gate.waiting < 1; i++) await sleep(5);
  expect(gate.waiting, 'the attempt waits for the slot').to.equal(1);
  controller.abort(new Error('the client went away'));
  const error = await rejectionOf(waiting);
  await (await holding).release();
  await sleep(200); // anything the abandoned call would send has been sent
  return error;
}

describe('an attempt queued in its client when its call is abandoned', () => {
  it('writeLock: is not sent (the aborted call sent no findAndModify and wrote nothing, and the document is free)', async function () {
    this.timeout(20_000);
    const { shared, slow, sent, close } = await oneSlotClient([{ _id: 'busy' }, { _id: 'wanted' }]);
    const locks = writeLock({ collection: slow, locktimeout: 10_000, changeStreams: false });
    const error = await abortWhileQueued(slow, () => locks.acquire({ _id: 'busy' }), (signal) => locks.acquire({ _id: 'wanted' }, { signal }));
    expect(error.message).to.equal('the client went away');
    expect(sent.map((query) => query._id), 'findAndModify commands sent').to.deep.equal(['busy']);
    expect(await liveEntries(shared, 'wanted'), 'nothing was written on the wanted document').to.deep.equal([]);
    expect(await whatAnAcquisitionGets(writeLock({ collection: shared }), { _id: 'wanted' }), 'another client takes it at once').to.equal('acquired');
    await close();
  });

  it('resourceLocks: an xlock is not sent either, and the resource is not locked', async function () {
    this.timeout(20_000);
    const { shared, slow, sent, close } = await oneSlotClient([]);
    const locks = resourceLocks({ collection: slow });
    await locks.createIndexes();
    const error = await abortWhileQueued(slow, () => locks.xlock('busy', 'job-1'), (signal) => locks.xlock('wanted', 'job-2', { signal }));
    expect(error.message).to.equal('the client went away');
    expect(sent.map((query) => query._id), 'findAndModify commands sent').to.deep.equal(['busy']);
    expect(await resourceLocks({ collection: shared }).status({ resource: 'wanted' }), 'nothing is locked on the wanted resource').to.deep.equal([]);
    await close();
  });
});
