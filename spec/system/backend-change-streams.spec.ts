/**
 * The test backend's change streams, as monglock's change feed needs them and mongod gives them:
 * an update event names its document (`documentKey._id`) and says what changed
 * (`updateDescription`), findAndModify writes are reported, and a server-side `$match` on
 * `documentKey._id` selects one document's events. On mongo-java-server this is the launcher's
 * doing (support/java: RecordingBackend, MongodOplog); on mongod, the server's own.
 */
import { expect } from 'chai';
import type { ChangeStream, ChangeStreamDocument, Collection, Document, UpdateFilter } from 'mongodb';
import { freshCollection, mongoBackend, newClient, requireCapability } from '../support/fixture';

/** Documents named by a string `_id`. */
type Named = { _id: string } & Document;

/** A fresh collection holding `documents`. */
async function collectionOf(documents: Named[]): Promise<Collection<Named>> {
  return (await freshCollection(documents)) as unknown as Collection<Named>;
}

/** `update` as the driver's types take it (they refuse operators on paths they cannot see in `Named`). */
const operators = (update: Document): UpdateFilter<Named> => update as UpdateFilter<Named>;

/** A stream of `collection`'s changes through `pipeline`, opened on the server before it is returned. */
async function watching(collection: Collection<Named>, pipeline: Document[] = []): Promise<ChangeStream<Named>> {
  const stream = collection.watch(pipeline, { maxAwaitTimeMS: 50 });
  await stream.tryNext(); // sends the aggregate: later writes are reported
  return stream;
}

/** The events `stream` delivers until `count` came or 5 s passed. */
async function eventsOf(stream: ChangeStream<Named>, count: number): Promise<ChangeStreamDocument<Named>[]> {
  const events: ChangeStreamDocument<Named>[] = [];
  const deadline = Date.now() + 5_000;
  while (events.length < count && Date.now() < deadline) {
    const event = await stream.tryNext();
    if (event) events.push(event);
  }
  return events;
}

describe("the test backend's change streams", function () {
  this.timeout(30_000);

  it('an updateOne event carries documentKey._id and an updateDescription with the paths it set and unset', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await collectionOf([{ _id: 'a', lock: { n: 1 }, gone: true }]);
    const stream = await watching(collection);
    try {
      await collection.updateOne({ _id: 'a' }, { $set: { 'lock.n': 2 }, $unset: { gone: '' } });
      const [event] = await eventsOf(stream, 1);
      expect(event).to.include({ operationType: 'update' });
      const update = event as ChangeStreamDocument<Named> & { documentKey: Document; updateDescription: Document };
      expect(update.documentKey).to.deep.equal({ _id: 'a' });
      expect(update.updateDescription.updatedFields).to.deep.equal({ 'lock.n': 2 });
      expect(update.updateDescription.removedFields).to.deep.equal(['gone']);
    } finally {
      await stream.close();
    }
  });

  it('findOneAndUpdate, its upsert and findOneAndDelete are reported, each with its document', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await collectionOf([{ _id: 'a', n: 1 }]);
    const stream = await watching(collection);
    try {
      await collection.findOneAndUpdate({ _id: 'a' }, { $inc: { n: 1 } });
      await collection.findOneAndUpdate({ _id: 'b' }, { $set: { n: 1 } }, { upsert: true });
      await collection.findOneAndDelete({ _id: 'b' });
      const events = await eventsOf(stream, 3);
      const seen = events.map((event) => [event.operationType, (event as { documentKey?: Document }).documentKey?._id]);
      expect(seen).to.deep.equal([['update', 'a'], ['insert', 'b'], ['delete', 'b']]);
      expect((events[0] as { updateDescription?: Document }).updateDescription?.updatedFields).to.deep.equal({ n: 2 });
    } finally {
      await stream.close();
    }
  });

  it("a collection's stream hears no other collection's drop (as on mongod)", async function () {
    requireCapability(this, 'changeStreams');
    const collection = await collectionOf([{ _id: 'a', n: 0 }]);
    const other = await collectionOf([{ _id: 'x', n: 0 }]);
    const stream = await watching(collection);
    try {
      await other.drop();
      await collection.updateOne({ _id: 'a' }, { $inc: { n: 1 } });
      const events = await eventsOf(stream, 1);
      expect(events.map((event) => event.operationType)).to.deep.equal(['update']);
    } finally {
      await stream.close();
    }
  });

  it("a $match on documentKey._id selects one document's events, whatever command wrote them", async function () {
    requireCapability(this, 'changeStreams');
    const collection = await collectionOf([{ _id: 'a', n: 0 }, { _id: 'b', n: 0 }]);
    const stream = await watching(collection, [{ $match: { 'documentKey._id': { $in: ['a', 'end'] } } }]);
    try {
      for (const _id of ['b', 'a', 'b']) await collection.updateOne({ _id }, { $inc: { n: 1 } });
      for (const _id of ['b', 'a']) await collection.findOneAndUpdate({ _id }, { $inc: { n: 1 } });
      await collection.insertOne({ _id: 'end' }); // selected too, after all the others: the stream has passed them
      const events = await eventsOf(stream, 3);
      expect(events.map((event) => (event as { documentKey?: Document }).documentKey?._id)).to.deep.equal(['a', 'a', 'end']);
    } finally {
      await stream.close();
    }
  });

  it('describes the kinds of update monglock makes as mongod does (the shapes spec/waiting/lock-changes.spec.ts lists)', async function () {
    requireCapability(this, 'changeStreams');
    const collection = await collectionOf([{ _id: 'a', lock: { tags: { write: [] }, queue: [{ id: 't1', exp: 1 }], until: 5 } }]);
    const stream = await watching(collection);
    try {
      await collection.updateOne({ _id: 'a' }, operators({ $push: { 'lock.queue': { id: 't2', exp: 2 } }, $currentDate: { 'lock.now': true }, $max: { 'lock.until': 9 } }));
      await collection.updateOne({ _id: 'a' }, { $set: { 'lock.queue.$[mine].exp': 7 } }, { arrayFilters: [{ 'mine.id': 't2' }] });
      await collection.updateOne({ _id: 'a' }, operators({ $pull: { 'lock.queue': { id: 't1' } } }));
      await collection.findOneAndUpdate({ _id: 'a' }, { $set: { 'lock.tags.write': [{ id: 'h' }] }, $unset: { 'lock.until': '' } });
      const described = (await eventsOf(stream, 4)).map((event) => {
        const { updatedFields, removedFields } = (event as { updateDescription: { updatedFields: Document; removedFields: string[] } }).updateDescription;
        return { updated: Object.keys(updatedFields).sort(), removed: removedFields };
      });
      expect(described).to.deep.equal([
        { updated: ['lock.now', 'lock.queue.1', 'lock.until'], removed: [] }, // a $push onto a non-empty array: its new element
        { updated: ['lock.queue.1.exp'], removed: [] }, // a positional $set: the element's index
        { updated: ['lock.queue'], removed: [] }, // a $pull: the whole array
        { updated: ['lock.tags.write'], removed: ['lock.until'] },
      ]);
    } finally {
      await stream.close();
    }
  });

  it("a change stream's getMore waits for an event (awaitData): an event written during the wait ends it, in that getMore's reply", async function () {
    requireCapability(this, 'changeStreams');
    if (mongoBackend().server === 'mongo-java-server' && process.env.MONGLOCK_JAVA_AWAIT === 'off') {
      console.log('      skipped: MONGLOCK_JAVA_AWAIT=off, mongo-java-server answers a getMore at once');
      this.skip();
    }
    const client = await newClient({ monitorCommands: true });
    const plain = await collectionOf([{ _id: 'a', n: 0 }]);
    const watched = client.db(plain.dbName).collection<Named>(plain.collectionName);
    const stream = watched.watch([], { maxAwaitTimeMS: 10_000 });
    let getMores = 0;
    client.on('commandStarted', (event) => {
      if (event.commandName !== 'getMore') return;
      // the stream's cursor exists: an update written now is after its start, seen by this getMore
      if (++getMores === 1) setTimeout(() => void watched.updateOne({ _id: 'a' }, { $inc: { n: 1 } }), 100);
    });
    try {
      const started = Date.now();
      const event = await stream.tryNext(); // the aggregate, then one getMore that may wait up to 10 s
      expect(event?.operationType).to.equal('update');
      expect(getMores, 'one getMore waited and brought the event').to.equal(1);
      expect(Date.now() - started, 'it answered when the event came, not at its 10 s').to.be.below(9_000);
    } finally {
      await stream.close();
      await client.close();
    }
  });
});
