import de.bwaldvogel.mongo.backend.AbstractCursor;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import de.bwaldvogel.mongo.bson.Document;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.NavigableMap;
import java.util.function.Function;

/**
 * A change stream's cursor over {@link MongodOplog}'s entries (ordered by time stamp): each batch
 * reads only the entries after its position, and the position moves past every entry it read,
 * also those the stream's pipeline dropped (as mongod's scan does; mongo-java-server's cursor read
 * the whole oplog each time and stayed at the last event it returned). Test infrastructure only.
 */
final class StreamCursor extends AbstractCursor {
    private final NavigableMap<BsonTimestamp, Document> entries;
    /** An entry's event through the stream's pipeline: none or one. */
    private final Function<Document, List<Document>> events;
    private BsonTimestamp position;
    private boolean inclusive;

    StreamCursor(long id, NavigableMap<BsonTimestamp, Document> entries, BsonTimestamp from, boolean inclusive,
                 Function<Document, List<Document>> events) {
        super(id);
        this.entries = entries;
        this.position = from;
        this.inclusive = inclusive;
        this.events = events;
    }

    /**
     * The stream's resume token at its position, as mongod's `postBatchResumeToken`: resuming after it
     * gives the entries this cursor has not read.
     */
    synchronized Document resumeToken() {
        return new Document("_data", token(inclusive ? new BsonTimestamp(position.getValue() - 1) : position));
    }

    /**
     * The resume token's `_data` of an oplog time stamp: "82" and the time stamp in 16 hex digits, as
     * mongod's begin (the rest of mongod's, which encodes the document key, is left out).
     */
    static String token(BsonTimestamp ts) {
        return String.format("82%016X", ts.getValue());
    }

    /** The oplog time stamp of a resume token {@link #token} made. */
    static BsonTimestamp fromToken(Document token) {
        String data = (String) token.get("_data");
        return new BsonTimestamp(Long.parseUnsignedLong(data.startsWith("82") && data.length() == 18 ? data.substring(2) : data, 16));
    }

    @Override
    public boolean isEmpty() {
        return false; // tailable: open until killed
    }

    @Override
    public synchronized List<Document> takeDocuments(int numberToReturn) {
        List<Document> batch = new ArrayList<>();
        for (Map.Entry<BsonTimestamp, Document> entry : entries.tailMap(position, inclusive).entrySet()) {
            if (numberToReturn > 0 && batch.size() >= numberToReturn) break;
            batch.addAll(events.apply(entry.getValue()));
            position = entry.getKey();
            inclusive = false;
        }
        return batch;
    }
}
