import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.ArrayFilters;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.oplog.NoopOplog;
import de.bwaldvogel.mongo.oplog.Oplog;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

/**
 * mongo-java-server's in-memory collection, whose updates and findAndModify writes reach the oplog
 * as mongod's do. Test infrastructure only.
 *
 * The server's own updateDocuments tells the oplog only the ids it modified, and its findAndModify
 * tells it nothing (it has no oplog to call). Here both run as the server runs them, while the
 * collection's hooks (an update applied, a document added or removed) note each change with the
 * document before and after; the notes go to the {@link MongodOplog} when the command ends, also
 * when it fails midway (what was applied is recorded, as on mongod), still under the collection's
 * lock, so that the oplog has the changes of one document in the order they were applied.
 */
final class RecordingCollection extends MemoryCollection {
    private final Supplier<Oplog> oplog;
    /** The changes of the command running (under this collection's lock), or null. */
    private List<MongodOplog.Change> changes;
    private Document update;

    RecordingCollection(MongoDatabase database, String name, CollectionOptions options, CursorRegistry cursors, Supplier<Oplog> oplog) {
        super(database, name, options, cursors);
        this.oplog = oplog;
    }

    @Override
    public synchronized Document updateDocuments(Document selector, Document updateQuery, ArrayFilters arrayFilters,
                                                 boolean isMulti, boolean isUpsert, Oplog given) {
        if (!(given instanceof MongodOplog)) return super.updateDocuments(selector, updateQuery, arrayFilters, isMulti, isUpsert, given);
        return recording((MongodOplog) given, updateQuery,
            () -> super.updateDocuments(selector, updateQuery, arrayFilters, isMulti, isUpsert, NoopOplog.get()));
    }

    @Override
    public synchronized Document findAndModify(Document query) {
        Oplog current = oplog.get();
        if (!(current instanceof MongodOplog)) return super.findAndModify(query);
        Object updateQuery = query.get("update");
        return recording((MongodOplog) current, updateQuery instanceof Document ? (Document) updateQuery : null, () -> super.findAndModify(query));
    }

    private Document recording(MongodOplog to, Document updateQuery, Supplier<Document> command) {
        changes = new ArrayList<>();
        update = updateQuery;
        try {
            return command.get();
        } finally {
            List<MongodOplog.Change> noted = changes;
            changes = null;
            update = null;
            for (MongodOplog.Change change : noted) to.record(getFullName(), change);
        }
    }

    @Override
    protected void handleUpdate(Integer position, Document oldDocument, Document newDocument) {
        super.handleUpdate(position, oldDocument, newDocument);
        if (changes == null || update == null) return;
        changes.add(UpdateDescriptions.isReplacement(update)
            ? MongodOplog.Change.replace(newDocument)
            : MongodOplog.Change.update(newDocument.get(getIdField()), UpdateDescriptions.of(update, oldDocument, newDocument).cloneDeeply()));
    }

    @Override
    public synchronized void addDocument(Document document) {
        super.addDocument(document);
        if (changes != null) changes.add(MongodOplog.Change.insert(document));
    }

    @Override
    public synchronized void removeDocument(Document document) {
        super.removeDocument(document);
        if (changes != null) changes.add(MongodOplog.Change.delete(document.get(getIdField())));
    }
}
