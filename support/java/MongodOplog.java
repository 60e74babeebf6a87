import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.AbstractCursor;
import de.bwaldvogel.mongo.backend.Cursor;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.Utils;
import de.bwaldvogel.mongo.backend.aggregation.Aggregation;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.oplog.Oplog;
import java.util.List;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * An oplog (the collection local.oplog.rs) whose change-stream events have mongod 5.0's shapes, in
 * place of mongo-java-server's CollectionBackedOplog. Test infrastructure only.
 *
 * Differences from CollectionBackedOplog, each towards mongod: an update event carries
 * `documentKey: {_id}` (CollectionBackedOplog put the update's operators there), an
 * `updateDescription` (see {@link UpdateDescriptions}) and no `fullDocument` unless the stream asks
 * for `updateLookup` (then the document as it is now, or null); an update without operators is a
 * `replace` event with the new document; every event names its `ns`; findAndModify writes are
 * recorded ({@link RecordingCollection} calls {@link #record}); an entry's time stamp is taken and
 * the entry appended under one lock, so a reader never passes an entry that lands later with an
 * earlier time stamp. Its own entries' `o` for an update is `{$v: 2, updateDescription}` (mongod
 * writes `{$v: 2, diff}`).
 */
final class MongodOplog implements Oplog {
    private final MongoBackend backend;
    private final MongoCollection<Document> entries;
    private final CursorRegistry cursors;
    private final UUID ui = UUID.randomUUID();
    private final AtomicInteger increment = new AtomicInteger();
    /** The entries of local.oplog.rs by time stamp, for the streams to read what follows their position. */
    private final ConcurrentSkipListMap<BsonTimestamp, Document> recent = new ConcurrentSkipListMap<>();
    /** Entries appended (and cursors killed) so far; waited on by getMores that wait for an event. */
    private long progress;
    private final Object signal = new Object();

    MongodOplog(MongoBackend backend, MongoCollection<Document> entries, CursorRegistry cursors) {
        this.backend = backend;
        this.entries = entries;
        this.cursors = cursors;
    }

    @Override
    public void handleInsert(String namespace, List<Document> documents) {
        for (Document document : documents) record(namespace, Change.insert(document));
    }

    /** Called by writes the launcher does not see in detail: an event with an empty updateDescription per document. */
    @Override
    public void handleUpdate(String namespace, Document selector, Document query, List<Object> modifiedIds) {
        for (Object id : modifiedIds) record(namespace, Change.update(id, UpdateDescriptions.of(new Document(), new Document(), new Document())));
    }

    @Override
    public void handleDelete(String namespace, Document query, List<Object> deletedIds) {
        for (Object id : deletedIds) record(namespace, Change.delete(id));
    }

    @Override
    public void handleDropCollection(String namespace) {
        if (isOwn(namespace)) return;
        String database = Utils.getDatabaseNameFromFullName(namespace);
        append(entry("c", database + ".$cmd").append("o", new Document("drop", Utils.getCollectionNameFromFullName(namespace))));
    }

    /** Appends the entry of one change of a document of `namespace`. */
    void record(String namespace, Change change) {
        if (isOwn(namespace)) return;
        Document entry = entry(change.op, namespace).append("o", change.o);
        if (change.id != Change.NONE) entry.append("o2", new Document("_id", change.id));
        append(entry);
    }

    private boolean isOwn(String namespace) {
        return entries.getFullName().equals(namespace);
    }

    private Document entry(String op, String namespace) {
        return new Document("ts", null).append("t", 1L).append("h", 0L).append("v", 2L).append("op", op)
            .append("ns", namespace).append("ui", ui).append("wall", backend.getClock().instant());
    }

    /**
     * The time stamp is taken under the oplog collection's lock, and is above the last one (also if the
     * clock steps back), so entries land in time-stamp order: a stream never passes one that lands later.
     */
    private void append(Document entry) {
        synchronized (entries) {
            BsonTimestamp ts = new BsonTimestamp(backend.getClock().instant(), increment.incrementAndGet());
            if (!recent.isEmpty() && ts.compareTo(recent.lastKey()) <= 0) ts = new BsonTimestamp(recent.lastKey().getValue() + 1);
            entry.put("ts", ts);
            entries.addDocument(entry);
            recent.put(ts, entry);
        }
        wake();
    }

    /** Wakes the getMores that wait (an entry was appended, or a cursor killed: each looks again). */
    void wake() {
        synchronized (signal) {
            progress++;
            signal.notifyAll();
        }
    }

    /** How far the oplog went (for {@link #awaitProgress}). */
    long progress() {
        synchronized (signal) {
            return progress;
        }
    }

    /** Waits until the oplog went further than `seen` ({@link #wake}), at most `nanos`. */
    void awaitProgress(long seen, long nanos) throws InterruptedException {
        long deadline = System.nanoTime() + nanos;
        synchronized (signal) {
            for (long left = nanos; progress == seen && left > 0; left = deadline - System.nanoTime()) {
                TimeUnit.NANOSECONDS.timedWait(signal, left);
            }
        }
    }

    /** Drops the entries older than `oldest`, as a capped oplog does. */
    void trim(BsonTimestamp oldest) {
        recent.headMap(oldest).clear();
        entries.deleteDocuments(new Document("ts", new Document("$lt", oldest)), Integer.MAX_VALUE);
    }

    /** True when `cursorId` is a change stream's cursor of this oplog. */
    boolean isStream(long cursorId) {
        try {
            return cursors.getCursor(cursorId) instanceof StreamCursor;
        } catch (RuntimeException e) {
            return false; // not found: the server's getMore says so
        }
    }

    private BsonTimestamp now() {
        return recent.isEmpty() ? new BsonTimestamp(backend.getClock().instant(), increment.get()) : recent.lastKey();
    }

    @Override
    public Cursor createCursor(Document changeStream, String namespace, Aggregation aggregation) {
        Document startAfter = (Document) changeStream.get("startAfter");
        Document resumeAfter = (Document) changeStream.get("resumeAfter");
        BsonTimestamp startAt = (BsonTimestamp) changeStream.get("startAtOperationTime");
        BsonTimestamp from = startAfter != null ? StreamCursor.fromToken(startAfter) : resumeAfter != null ? StreamCursor.fromToken(resumeAfter) : startAt != null ? startAt : now();
        if (resumeAfter != null && droppedBefore(namespace, from)) return invalidated(from);
        boolean lookUp = "updateLookup".equals(changeStream.get("fullDocument"));
        StreamCursor cursor = new StreamCursor(cursors.generateCursorId(), recent, from, startAt != null && startAfter == null && resumeAfter == null,
            entry -> !inNamespace(entry, namespace) ? List.of() : aggregation.runStagesAsStream(Stream.of(event(entry, lookUp))).collect(Collectors.toList()));
        cursors.add(cursor);
        return cursor;
    }

    /** True when `entry` is of the stream's collection: a change of one of its documents, or a command that names it (its drop; a collection's stream on mongod hears no other collection's). */
    private static boolean inNamespace(Document entry, String namespace) {
        String ns = (String) entry.get("ns");
        if (ns.equals(namespace)) return true;
        if (!Utils.getDatabaseNameFromFullName(namespace).equals(Utils.getDatabaseNameFromFullName(ns)) || !Utils.getCollectionNameFromFullName(ns).equals("$cmd")) return false;
        Document o = (Document) entry.get("o");
        return o != null && Utils.getCollectionNameFromFullName(namespace).equals(o.get(o.keySet().iterator().next()));
    }

    private boolean droppedBefore(String namespace, BsonTimestamp position) {
        Document drop = new Document("drop", Utils.getCollectionNameFromFullName(namespace));
        String commands = Utils.getDatabaseNameFromFullName(namespace) + ".$cmd";
        return recent.headMap(position, true).values().stream()
            .anyMatch(entry -> "c".equals(entry.get("op")) && commands.equals(entry.get("ns")) && drop.equals(entry.get("o")));
    }

    private static Cursor invalidated(BsonTimestamp position) {
        return new AbstractCursor(0) {
            @Override
            public boolean isEmpty() {
                return false;
            }

            @Override
            public List<Document> takeDocuments(int numberToReturn) {
                return List.of(new Document("_id", new Document("_data", StreamCursor.token(position))).append("operationType", "invalidate"));
            }
        };
    }

    /** The change-stream event of one oplog entry, as mongod 5.0 shapes it. */
    private Document event(Document entry, boolean lookUp) {
        BsonTimestamp ts = timestamp(entry);
        String ns = (String) entry.get("ns");
        Document o = (Document) entry.get("o");
        Document event = new Document("_id", new Document("_data", StreamCursor.token(ts)));
        String op = (String) entry.get("op");
        if (op.equals("c")) {
            String command = o.keySet().iterator().next();
            return event.append("operationType", command).append("clusterTime", ts)
                .append("ns", namespaceDocument(Utils.getDatabaseNameFromFullName(ns), o.get(command)));
        }
        Object id = op.equals("i") ? o.get("_id") : op.equals("d") ? o.get("_id") : ((Document) entry.get("o2")).get("_id");
        boolean update = op.equals("u") && o.containsKey("$v");
        event.append("operationType", op.equals("i") ? "insert" : op.equals("d") ? "delete" : update ? "update" : "replace")
            .append("clusterTime", ts);
        if (op.equals("i") || (op.equals("u") && !update)) event.append("fullDocument", o);
        if (update && lookUp) event.append("fullDocument", current(ns, id));
        event.append("ns", namespaceDocument(Utils.getDatabaseNameFromFullName(ns), Utils.getCollectionNameFromFullName(ns)))
            .append("documentKey", new Document("_id", id));
        if (update) event.append("updateDescription", o.get("updateDescription"));
        return event;
    }

    private static Document namespaceDocument(String database, Object collection) {
        return new Document("db", database).append("coll", collection);
    }

    private Document current(String namespace, Object id) {
        MongoDatabase database = backend.resolveDatabase(Utils.getDatabaseNameFromFullName(namespace));
        MongoCollection<?> collection = database == null ? null : database.resolveCollection(Utils.getCollectionNameFromFullName(namespace), false);
        if (collection == null) return null;
        for (Document document : collection.handleQuery(new Document("_id", id), 0, 1)) return document;
        return null;
    }

    private static BsonTimestamp timestamp(Document entry) {
        return (BsonTimestamp) entry.get("ts");
    }

    /** One change of one document, as its oplog entry records it. */
    static final class Change {
        static final Object NONE = new Object();
        final String op;
        final Object id;
        final Document o;

        private Change(String op, Object id, Document o) {
            this.op = op;
            this.id = id;
            this.o = o;
        }

        static Change insert(Document document) {
            return new Change("i", NONE, document.cloneDeeply());
        }

        static Change update(Object id, Document updateDescription) {
            return new Change("u", id, new Document("$v", 2).append("updateDescription", updateDescription));
        }

        static Change replace(Document document) {
            return new Change("u", document.get("_id"), document.cloneDeeply());
        }

        static Change delete(Object id) {
            return new Change("d", NONE, new Document("_id", id));
        }
    }
}
