/**
 * The server-side filter of a process's change feed (lockChanges): which change events wake a
 * waiter. Checked by the server itself, on every backend: documents shaped like the change events
 * mongod sends for each of monglock's writes (their `updateDescription` paths, as mongod reports
 * modifier updates: a `$push` as `<array>.<n>`, a `$pull` or `$set` of an array as the whole
 * array, a positional `$set` as `<array>.<n>.<field>`) go through the same `$match`.
 */
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { lockChanges } from '../../lib/waiting/change-feed';
import { freshCollection } from '../support/fixture';

const update = (updatedFields: Document, removedFields: string[] = []): Document => ({ operationType: 'update', updateDescription: { updatedFields, removedFields } });
const now = new Date();

/** Event shapes by what wrote them, and whether a waiter elsewhere must hear of them. */
const EVENTS: ReadonlyArray<readonly [string, Document, boolean]> = [
  ['the first lock on a document (the field is created)', update({ lock: { fence: 1, tags: { write: [{ id: 'a' }] } } }), true],
  ['a shared lock added without its fence moved (an owner\'s nested hold: $push onto the tag list)', update({ 'lock.tags.read.2': { id: 'b' }, 'lock.now': now }), true],
  ['a release ($pull from the tag list)', update({ 'lock.tags.write': [], 'lock.now': now }), true],
  ['a release that commits (the tag list and the commit record)', update({ 'lock.tags.write': [], 'lock.committed.0': { id: 'a' }, 'lock.now': now, balance: 70 }), true],
  ['a conversion (two tag lists, the fence moved)', update({ 'lock.tags.write': [], 'lock.tags.read.0': { id: 'a' }, 'lock.fence': 3, 'lock.now': now }), true],
  ['a fair acquisition (its ticket taken out with the fence moved)', update({ 'lock.tags.write': [{ id: 'a' }], 'lock.queue': [], 'lock.fence': 3, 'lock.now': now }), true],
  ['an acquisition that pruned another tag\'s expired entries', update({ 'lock.tags.write': [{ id: 'a' }], 'lock.tags.read': [], 'lock.fence': 3, 'lock.now': now }), true],
  ['a conversion that completes a pending upgrade (the fence moved, the upgrade taken out)', update({ 'lock.tags.write': [{ id: 'a' }], 'lock.upgrade': [], 'lock.fence': 3, 'lock.now': now }), true],
  ['a pending upgrade set or withdrawn', update({ 'lock.upgrade': [], 'lock.now': now }), true],
  ['a v2 lock removed ($unset of active and timestamp)', update({}, ['lock.active', 'lock.timestamp']), true],
  ['the whole lock field removed', update({}, ['lock']), true],
  ['a tag list shortened, as a pipeline update reports it (truncatedArrays)', { operationType: 'update', updateDescription: { updatedFields: { 'lock.now': now }, removedFields: [], truncatedArrays: [{ field: 'lock.tags.write', newSize: 0 }] } }, true],
  ['a deleted document', { operationType: 'delete' }, true],
  ['a replaced document', { operationType: 'replace' }, true],
  ['an update event without a description (a server that gives none)', { operationType: 'update' }, true],
  ['an exclusive acquisition ($set of the tag list, the fence moved): it frees nothing', update({ 'lock.tags.write': [{ id: 'a' }], 'lock.fence': 2, 'lock.now': now }), false],
  ['a shared acquisition ($push onto the tag list, the fence moved)', update({ 'lock.tags.read.2': { id: 'b' }, 'lock.fence': 4, 'lock.now': now }), false],
  ['a hand-over (the holder\'s entry replaced by the waiter\'s, the fence moved)', update({ 'lock.tags.write': [{ id: 'b' }], 'lock.fence': 5, 'lock.now': now }), false],
  ['a semaphore acquisition (one entry pushed, the fence moved)', update({ 'lock.tags.slot.1': { id: 'c', permits: 2 }, 'lock.fence': 6 }), false],
  ['a fair ticket renewal (positional $set of its exp)', update({ 'lock.queue.0.exp': now, 'lock.now': now, 'lock.until': now }), false],
  ['a fair ticket taken ($push onto the queue)', update({ 'lock.queue.3': { id: 't' }, 'lock.now': now, 'lock.until': now }), false],
  ['a lease extension (positional $set of the entry exp)', update({ 'lock.tags.write.0.exp': now, 'lock.now': now, 'lock.until': now }), false],
  ['an assertive continuation that pruned nothing', update({ 'lock.now': now, 'lock.judged': now }), false],
  ['a write outside the lock field', update({ balance: 3 }), false],
  ['a field whose name only starts like the lock field', update({ 'locks.tags.write': [] }), false],
  ['an insert', { operationType: 'insert' }, false],
];

describe('the change feed\'s server-side filter (lockChanges)', () => {
  it('passes the events that can let a waiter in, and drops acquisitions and bookkeeping: tickets, extensions, clock stamps, other fields', async () => {
    const collection = await freshCollection(EVENTS.map(([what, event]) => ({ _id: what, ...event })));
    const passed = new Set((await collection.aggregate(lockChanges('lock')).toArray()).map((event) => event._id as string));
    const wrong = EVENTS.filter(([what, , wakes]) => passed.has(what) !== wakes).map(([what, , wakes]) => `${what}: ${wakes ? 'dropped' : 'passed'}`);
    expect(wrong).to.deep.equal([]);
  });

  // A waiter that gives up takes its fair ticket out with `$pull` (dropTicketOperation; the CLI's `release --id` of a waiting
  // row sends the same): mongod reports a `$pull` as the whole array, `updatedFields: { 'lock.queue': [<tickets left>] }`
  // (4.4: a `$set` of the array in the oplog; 5.0-8.x: the array's new value, SERVER-71269). The next ticket is then first:
  // while the lock is free, that waiter's acquisition stops being refused, and it is nudgeable (one ticket ahead, as last seen).
  it('passes a fair ticket taken out of the queue ($pull: the whole queue array), which lets the next fair waiter of another process take its turn', async () => {
    const ticket = (id: string): Document => ({ id, tag: 'write', at: now, exp: now });
    const withdrawals: ReadonlyArray<readonly [string, Document]> = [
      ['the first of two tickets withdrawn by a waiter that gave up', update({ 'lock.queue': [ticket('second')] })],
      ['a waiting ticket released by the CLI (release --id), two others left', update({ 'lock.queue': [ticket('b'), ticket('c')] })],
    ];
    const collection = await freshCollection(withdrawals.map(([what, event]) => ({ _id: what, ...event })));
    const passed = new Set((await collection.aggregate(lockChanges('lock')).toArray()).map((event) => event._id as string));
    expect(withdrawals.map(([what]) => what).filter((what) => !passed.has(what)), 'withdrawals the filter drops').to.deep.equal([]);
  });

  it('follows the lock field option: a lock kept under `claims` wakes on `claims.tags`, not on `lock.tags`', async () => {
    const collection = await freshCollection([
      { _id: 'claims', ...update({ 'claims.tags.write': [] }) },
      { _id: 'lock', ...update({ 'lock.tags.write': [] }) },
    ]);
    expect((await collection.aggregate(lockChanges('claims')).toArray()).map((event) => event._id)).to.deep.equal(['claims']);
  });
});
