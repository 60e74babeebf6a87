/**
 * An acquisition attempt still waiting for one of its client's command slots when its call is
 * abandoned (its signal aborts, its `wait` runs out) is not sent: it would take a lock nobody
 * wants, and a cleanup release after it, at the moment the client is congested.
 */
import { expect } from 'chai';
import type { CommandStartedEvent, Document } from 'mongodb';
import { writeLock } from '../../lib';
import { commandGateOf } from '../../lib/engine/command-gate';
import { delayedCollection } from '../../stress/delayed-collection';
import { freshCollection, newClient, rejectionOf, sleep } from '../support/fixture';
import { isAcquisition, liveEntries } from '../support/lock-commands';

describe('an attempt queued in its client when its call is abandoned', () => {
  it('is not sent: the aborted call sent no findAndModify and wrote nothing, and the document is free', async function () {
    this.timeout(20_000);
    // One slot of lock commands (maxPoolSize 1), taken by an acquisition whose reply comes 600 ms late.
    const client = await newClient({ monitorCommands: true, maxPoolSize: 1 });
    const shared = await freshCollection([{ _id: 'busy' }, { _id: 'wanted' }]);
    const collection = client.db(shared.dbName).collection(shared.collectionName);
    const sent: Document[] = [];
    client.on('commandStarted', (event: CommandStartedEvent) => {
      if (event.commandName === 'findAndModify') sent.push(event.command.query as Document);
    });
    let acquisitions = 0;
    const slow = delayedCollection(collection, { reply: (method, _n, args) => (isAcquisition(method, args) && ++acquisitions === 1 ? 600 : 0) });
    const locks = writeLock({ collection: slow, locktimeout: 10_000, changeStreams: false });
    const busy = locks.acquire({ _id: 'busy' });
    const gate = commandGateOf(collection);
    for (let i = 0; i < 500 && gate.inFlight < 1; i++) await sleep(5);
    const controller = new AbortController();
    const wanted = locks.acquire({ _id: 'wanted' }, { signal: controller.signal });
    for (let i = 0; i < 500 && gate.waiting < 1; i++) await sleep(5);
    expect(gate.waiting, 'the attempt waits for the slot').to.equal(1);
    controller.abort(new Error('the client went away'));
    expect((await rejectionOf(wanted)).message).to.equal('the client went away');
    await (await busy).release();
    await sleep(200); // anything the abandoned call would send has been sent
    expect(sent.map((query) => query._id), 'findAndModify commands sent').to.deep.equal(['busy']);
    expect(await liveEntries(shared, 'wanted'), 'nothing was written on the wanted document').to.deep.equal([]);
    await client.close();
  });
});
