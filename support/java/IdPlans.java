import de.bwaldvogel.mongo.backend.Index;
import de.bwaldvogel.mongo.bson.BsonRegularExpression;
import de.bwaldvogel.mongo.bson.Document;
import de.bwaldvogel.mongo.backend.Missing;
import java.util.Collection;
import java.util.List;

/**
 * Plans by `_id` as mongod does: a filter whose top level has an equality on `_id` (a value,
 * `{$eq: v}` or `{$in: [...]}`, whatever else the filter says) is served by the `_id` index, which
 * gives the candidates; the whole filter is then applied to each by the server's matcher, so only
 * which documents are read changes, never which match. mongo-java-server itself uses an index only
 * when the filter's keys are exactly the index's. Test infrastructure only.
 */
final class IdPlans {
    /** The `$match` of the aggregate running on this thread, for its collection's first read. */
    private static final ThreadLocal<Object[]> AGGREGATE_MATCH = new ThreadLocal<>();

    private IdPlans() {
    }

    /**
     * The positions of the documents `filter` can match, from the `_id` index of `indexes`, or null
     * when the filter has no `_id` equality this plans by (then the whole collection is read).
     */
    static <P> Iterable<P> candidates(List<Index<P>> indexes, String idField, Document filter) {
        Document byId = idQuery(idField, filter);
        if (byId == null) return null;
        for (Index<P> index : indexes) {
            if (index.canHandle(byId)) return index.getPositions(byId);
        }
        return null;
    }

    /** `{_id: v}` or `{_id: {$in: [...]}}` for the `_id` equality of `filter`, or null. */
    static Document idQuery(String idField, Document filter) {
        if (filter == null || !filter.containsKey(idField)) return null;
        Object given = filter.get(idField);
        if (isPlainValue(given)) return new Document(idField, given);
        if (!(given instanceof Document) || BsonRegularExpression.isRegularExpression(given)) return null;
        Document operators = (Document) given;
        if (operators.containsKey("$eq")) {
            Object value = operators.get("$eq");
            return isPlainValue(value) ? new Document(idField, value) : null;
        }
        Object in = operators.get("$in");
        if (!(in instanceof Collection)) return null;
        for (Object value : (Collection<?>) in) {
            if (!isPlainValue(value)) return null;
        }
        return new Document(idField, new Document("$in", in));
    }

    /** A value the `_id` index looks up as mongod compares it: not null, an array, a regex or an operator document. */
    private static boolean isPlainValue(Object value) {
        if (Missing.isNullOrMissing(value) || value instanceof Collection || BsonRegularExpression.isRegularExpression(value)) return false;
        if (!(value instanceof Document)) return true;
        for (String key : ((Document) value).keySet()) {
            if (key.startsWith("$")) return false;
        }
        return true;
    }

    /** Runs `command` (an aggregate on `collection`, its full name) with its first `$match` stage known to that collection's first read. */
    static <T> T withAggregateMatch(String collection, Document match, java.util.function.Supplier<T> command) {
        AGGREGATE_MATCH.set(new Object[] {collection, match});
        try {
            return command.get();
        } finally {
            AGGREGATE_MATCH.remove();
        }
    }

    /** The `$match` of the aggregate running on this thread if it reads `collection` (once: later reads are other stages'), else null. */
    static Document takeAggregateMatch(String collection) {
        Object[] match = AGGREGATE_MATCH.get();
        if (match == null || !match[0].equals(collection)) return null;
        AGGREGATE_MATCH.remove();
        return (Document) match[1];
    }
}
