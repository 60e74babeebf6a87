import de.bwaldvogel.mongo.bson.Document;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;

/**
 * The `updateDescription` a mongod 5.0 change stream gives for one update with operators, rebuilt
 * from the update and the document before and after it. Test infrastructure only.
 *
 * As mongod logs it ($v: 2 oplog entries), each operator's path is reported as written, with:
 * positional parts ($, $[], $[name]) resolved to the indexes of the elements that changed; the
 * first missing component of a path reported whole when the update created it (mongod logs a
 * created subtree at its top); a path whose value did not change left out (mongod skips no-ops);
 * `$unset` and the source of `$rename` in `removedFields`; `$push`/`$addToSet` that append to a
 * non-empty array reported element by element (`path.N`), else the whole array; `$pull`,
 * `$pullAll` and `$pop` reported as the whole array. `truncatedArrays` is always empty (mongod
 * fills it only for replacement-style and pipeline updates). Where mongod might differ: an
 * `$addToSet` appending to a non-empty array (reported here per element), and paths through
 * arrays written without positional parts (`a.0.b`), reported as written.
 */
final class UpdateDescriptions {
    private UpdateDescriptions() {
    }

    /** A value that is not there (null is a value). */
    private static final Object ABSENT = new Object();

    /** True when `update` replaces the document (no operator at its top level): mongod reports a `replace` event. */
    static boolean isReplacement(Document update) {
        return update.keySet().stream().noneMatch(key -> key.startsWith("$"));
    }

    /** `{updatedFields, removedFields, truncatedArrays}` of `update` turning `before` into `after`. */
    static Document of(Document update, Document before, Document after) {
        Document updated = new Document();
        Set<String> removed = new LinkedHashSet<>();
        try {
            for (Map.Entry<String, Object> operator : update.entrySet()) {
                if (!(operator.getValue() instanceof Document)) continue;
                boolean append = operator.getKey().equals("$push") || operator.getKey().equals("$addToSet");
                for (Map.Entry<String, Object> target : ((Document) operator.getValue()).entrySet()) {
                    walk(before, after, target.getKey().split("\\."), 0, "", append, updated, removed);
                    if (operator.getKey().equals("$rename") && target.getValue() instanceof String) {
                        walk(before, after, ((String) target.getValue()).split("\\."), 0, "", false, updated, removed);
                    }
                }
            }
        } catch (RuntimeException e) {
            // a shape not foreseen: fall back to the top-level difference, never to no event
            updated = new Document();
            removed.clear();
            topLevel(before, after, updated, removed);
        }
        return new Document("updatedFields", updated)
            .append("removedFields", new ArrayList<>(removed))
            .append("truncatedArrays", new ArrayList<>());
    }

    private static void walk(Object before, Object after, String[] parts, int index, String prefix, boolean append,
                             Document updated, Set<String> removed) {
        if (index == parts.length) {
            leaf(before, after, prefix, append, updated, removed);
            return;
        }
        String part = parts[index];
        if (part.startsWith("$")) {
            if (!(before instanceof List) || !(after instanceof List)) {
                leaf(before, after, prefix, false, updated, removed);
                return;
            }
            int size = Math.max(((List<?>) before).size(), ((List<?>) after).size());
            for (int element = 0; element < size; element++) {
                String at = String.valueOf(element);
                walk(child(before, at), child(after, at), parts, index + 1, join(prefix, at), append, updated, removed);
            }
            return;
        }
        Object was = child(before, part);
        Object is = child(after, part);
        String path = join(prefix, part);
        if (was == ABSENT && is == ABSENT) return;
        if (was == ABSENT) {
            updated.put(path, is);
        } else if (is == ABSENT) {
            removed.add(path);
        } else {
            walk(was, is, parts, index + 1, path, append, updated, removed);
        }
    }

    private static void leaf(Object before, Object after, String path, boolean append, Document updated, Set<String> removed) {
        if (Objects.equals(before, after)) return;
        if (after == ABSENT) {
            removed.add(path);
            return;
        }
        if (append && before instanceof List && after instanceof List) {
            List<?> was = (List<?>) before;
            List<?> is = (List<?>) after;
            if (!was.isEmpty() && is.size() > was.size() && is.subList(0, was.size()).equals(was)) {
                for (int element = was.size(); element < is.size(); element++) updated.put(path + "." + element, is.get(element));
                return;
            }
        }
        updated.put(path, after);
    }

    private static void topLevel(Document before, Document after, Document updated, Set<String> removed) {
        for (String key : after.keySet()) {
            if (!before.containsKey(key) || !Objects.equals(before.get(key), after.get(key))) updated.put(key, after.get(key));
        }
        for (String key : before.keySet()) {
            if (!after.containsKey(key)) removed.add(key);
        }
    }

    private static Object child(Object container, String part) {
        if (container instanceof Document) {
            Document document = (Document) container;
            return document.containsKey(part) ? document.get(part) : ABSENT;
        }
        if (container instanceof List && part.chars().allMatch(Character::isDigit) && !part.isEmpty()) {
            List<?> list = (List<?>) container;
            int element = Integer.parseInt(part);
            return element < list.size() ? list.get(element) : ABSENT;
        }
        return ABSENT;
    }

    private static String join(String prefix, String part) {
        return prefix.isEmpty() ? part : prefix + "." + part;
    }
}
