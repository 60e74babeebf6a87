import de.bwaldvogel.mongo.MongoCollection;
import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.backend.memory.MemoryDatabase;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.oplog.Oplog;

/**
 * mongo-java-server's in-memory backend whose oplog, once enabled, is a {@link MongodOplog} and
 * whose collections are {@link RecordingCollection}s: change streams with mongod's event shapes
 * that also see findAndModify writes. Without enableOplog() it runs as MemoryBackend does. Test
 * infrastructure only.
 */
final class RecordingBackend extends MemoryBackend {
    @Override
    public MemoryDatabase openOrCreateDatabase(String databaseName) {
        return new MemoryDatabase(databaseName, getCursorRegistry()) {
            @Override
            protected MemoryCollection openOrCreateCollection(String collectionName, CollectionOptions options) {
                return new RecordingCollection(this, collectionName, options, cursorRegistry, RecordingBackend.this::currentOplog);
            }
        };
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
