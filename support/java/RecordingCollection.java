import de.bwaldvogel.mongo.MongoDatabase;
import de.bwaldvogel.mongo.backend.ArrayFilters;
import de.bwaldvogel.mongo.backend.CollectionOptions;
import de.bwaldvogel.mongo.backend.CursorRegistry;
import de.bwaldvogel.mongo.backend.QueryResult;
import de.bwaldvogel.mongo.backend.memory.MemoryCollection;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.oplog.NoopOplog;
import de.bwaldvogel.mongo.oplog.Oplog;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
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
 *
 * Its queries (find, count, update, findAndModify, delete, and an aggregate's leading `$match`)
 * plan by `_id` as mongod does: see {@link IdPlans}.
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

    /** A filter with an `_id` equality reads the documents the `_id` index gives, and applies the whole filter to them. */
    @Override
    protected QueryResult queryDocuments(Document query, Document orderBy, int numberToSkip, int limit, int batchSize, Document fieldSelector) {
        boolean natural = orderBy != null && orderBy.containsKey("$natural");
        Iterable<Integer> candidates = natural ? null : IdPlans.candidates(getIndexes(), getIdField(), query);
        if (candidates == null) return super.queryDocuments(query, orderBy, numberToSkip, limit, batchSize, fieldSelector);
        return matchDocuments(query, candidates, orderBy, numberToSkip, limit, batchSize, fieldSelector);
    }

    /**
     * The documents at `positions` that `query` matches; a position emptied meanwhile (a document
     * removed by another connection after the index was read) is passed over.
     */
    @Override
    protected QueryResult matchDocuments(Document query, Iterable<Integer> positions, Document orderBy,
                                         int numberToSkip, int limit, int batchSize, Document fieldSelector) {
        Stream<Document> documents = StreamSupport.stream(positions.spliterator(), false).map(this::getDocument).filter(Objects::nonNull);
        return matchDocumentsFromStream(documents, query, orderBy, numberToSkip, limit, batchSize, fieldSelector);
    }

    /** An aggregate whose first stage is a `$match` with an `_id` equality reads those documents only (its `$match` still filters them). */
    @Override
    public Iterable<Document> queryAll() {
        Document match = IdPlans.takeAggregateMatch(getFullName());
        if (match == null) return super.queryAll();
        synchronized (this) {
            Iterable<Integer> candidates = IdPlans.candidates(getIndexes(), getIdField(), match);
            if (candidates == null) return super.queryAll();
            return StreamSupport.stream(candidates.spliterator(), false).map(this::getDocument).filter(Objects::nonNull).collect(Collectors.toList());
        }
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
