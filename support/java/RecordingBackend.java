import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.Cursor;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.DatabaseResolver;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.oplog.Oplog;
import io.netty.channel.Channel;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * mongo-java-server's in-memory backend whose oplog, once enabled, is a {@link MongodOplog} and
 * whose collections are {@link RecordingCollection}s: change streams with mongod's event shapes
 * that also see findAndModify writes, and whose getMore waits for an event as mongod's does. Without
 * enableOplog() it runs as MemoryBackend does. Test infrastructure only.
 */
final class RecordingBackend extends MemoryBackend {
    /** How long a change stream's getMore waits for an event when it does not say (mongod's default, 1 s). */
    static final long DEFAULT_AWAIT_MS = 1_000;
    private final boolean awaitData;

    /** With `awaitData`, a change stream's getMore waits for an event as mongod's does; without, it answers at once. */
    RecordingBackend(boolean awaitData) {
        this.awaitData = awaitData;
    }

    /**
     * A change stream's getMore that finds no event waits, as mongod's does, until one is appended to
     * the oplog and passes the stream's pipeline, or its `maxTimeMS` (the driver's `maxAwaitTimeMS`;
     * 1 s when not given) passes, or its cursor is killed; then answers what there is. Other getMores
     * answer at once.
     */
    @Override
    protected Document handleGetMore(String databaseName, String command, Document query) {
        Oplog current = oplog;
        long cursorId = ((Number) query.get(command)).longValue();
        if (!awaitData || !(current instanceof MongodOplog) || !((MongodOplog) current).isStream(cursorId)) {
            return withResumeToken(super.handleGetMore(databaseName, command, query));
        }
        MongodOplog stream = (MongodOplog) current;
        Object given = query.get("maxTimeMS");
        long waitMs = given instanceof Number && ((Number) given).longValue() > 0 ? ((Number) given).longValue() : DEFAULT_AWAIT_MS;
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(waitMs);
        while (true) {
            long seen = stream.progress();
            Document reply = super.handleGetMore(databaseName, command, query);
            Document cursor = (Document) reply.get("cursor");
            long left = deadline - System.nanoTime();
            if (!((List<?>) cursor.get("nextBatch")).isEmpty() || ((Number) cursor.get("id")).longValue() == 0 || left <= 0) return withResumeToken(reply);
            try {
                stream.awaitProgress(seen, left);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return withResumeToken(reply);
            }
        }
    }

    @Override
    public MemoryDatabase openOrCreateDatabase(String databaseName) {
        return new MemoryDatabase(databaseName, getCursorRegistry()) {
            @Override
            protected MemoryCollection openOrCreateCollection(String collectionName, CollectionOptions options) {
                return new RecordingCollection(this, collectionName, options, cursorRegistry, RecordingBackend.this::currentOplog);
            }

            /** An aggregate that starts with a `$match` reads, as on mongod, by the `_id` that `$match` may name (see {@link IdPlans}). */
            @Override
            public Document handleCommand(Channel channel, String command, Document query, DatabaseResolver resolver, Oplog oplog) {
                Document match = command.equalsIgnoreCase("aggregate") ? leadingMatch(query) : null;
                if (match == null) return super.handleCommand(channel, command, query, resolver, oplog);
                String collection = getDatabaseName() + "." + query.get(command);
                return IdPlans.withAggregateMatch(collection, match, () -> super.handleCommand(channel, command, query, resolver, oplog));
            }
        };
    }

    /** The `$match` an aggregate on a collection starts with, or null. */
    private static Document leadingMatch(Document aggregate) {
        Object collection = aggregate.get("aggregate");
        Object pipeline = aggregate.get("pipeline");
        if (!(collection instanceof String) || !(pipeline instanceof List) || ((List<?>) pipeline).isEmpty()) return null;
        Object first = ((List<?>) pipeline).get(0);
        Object match = first instanceof Document && ((Document) first).size() == 1 ? ((Document) first).get("$match") : null;
        return match instanceof Document ? (Document) match : null;
    }

    /** A change stream's opening aggregate answers, as mongod's, with a `postBatchResumeToken`. */
    @Override
    public Document handleCommand(Channel channel, String databaseName, String command, Document query) {
        Document reply = super.handleCommand(channel, databaseName, command, query);
        return command.equalsIgnoreCase("aggregate") ? withResumeToken(reply) : reply;
    }

    /** `reply` with its stream cursor's `postBatchResumeToken` (mongod gives one with every batch of a change stream). */
    private Document withResumeToken(Document reply) {
        Object cursor = reply.get("cursor");
        Object id = cursor instanceof Document ? ((Document) cursor).get("id") : null;
        if (!(id instanceof Number) || ((Number) id).longValue() == 0) return reply;
        try {
            Cursor open = getCursorRegistry().getCursor(((Number) id).longValue());
            if (open instanceof StreamCursor) ((Document) cursor).put("postBatchResumeToken", ((StreamCursor) open).resumeToken());
        } catch (RuntimeException e) {
            // killed meanwhile: no token
        }
        return reply;
    }

    /** As mongod, a killCursors ends the getMore that waits on a killed cursor (with an error: cursor not found). */
    @Override
    protected Document handleKillCursors(Document query) {
        Document reply = super.handleKillCursors(query);
        Oplog current = oplog;
        if (current instanceof MongodOplog) ((MongodOplog) current).wake();
        return reply;
    }

    /** Drops the oplog's entries older than `oldest` (as a capped oplog does); nothing when the oplog is off. */
    void trimOplog(BsonTimestamp oldest) {
        Oplog current = oplog;
        if (current instanceof MongodOplog) ((MongodOplog) current).trim(oldest);
    }

    private Oplog currentOplog() {
        return oplog;
    }

    @Override
    @SuppressWarnings("unchecked")
    protected Oplog createOplog() {
        MongoDatabase local = resolveDatabase("local");
        MongoCollection<Document> entries = (MongoCollection<Document>) local.resolveCollection(OPLOG_COLLECTION_NAME, false);
        if (entries == null) entries = (MongoCollection<Document>) local.createCollectionOrThrowIfExists(OPLOG_COLLECTION_NAME);
        return new MongodOplog(this, entries, getCursorRegistry());
    }
}
