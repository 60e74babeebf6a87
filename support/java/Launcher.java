import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.MongoVersion;
import de.bwaldvogel.mongo.bson.BsonTimestamp;
import java.net.InetSocketAddress;
import java.time.Instant;
import java.util.List;

/**
 * Starts mongo-java-server (in-memory backend, its oplog on for change streams, with mongod's
 * event shapes: {@link RecordingBackend}) on 127.0.0.1 and the given port (0 = any free port), prints "READY <port>", and stops when its standard input closes (the parent died or
 * asked it to stop) or on SIGTERM. Test infrastructure only.
 *
 * It reports MongoDB 5.0 with 5.0's wire version (13). mongo-java-server's own MONGO_5_0
 * reports wire version 8 (4.2), which driver 7 refuses ("requires at least 9"); 13 is what a
 * real mongod 5.0 reports, so both driver 6 and driver 7 talk to it as they would to 5.0.
 */
public class Launcher {
    /** MongoDB 5.0, as a real mongod 5.0 reports itself. */
    static final MongoVersion MONGO_5_0_WIRE_13 = new MongoVersion() {
        @Override
        public List<Integer> getVersionArray() {
            return List.of(5, 0, 0);
        }

        @Override
        public int getWireVersion() {
            return 13;
        }
    };

    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 0;
        // A change stream's getMore waits for an event (awaitData) as on mongod, each connection on a
        // thread of its own; MONGLOCK_JAVA_AWAIT=off answers at once on the server's shared I/O threads, as before.
        boolean awaitData = !"off".equals(System.getenv("MONGLOCK_JAVA_AWAIT"));
        RecordingBackend backend = new RecordingBackend(awaitData);
        backend.version(MONGO_5_0_WIRE_13);
        // Change streams deliver only with the oplog on: then events have mongod's shapes and
        // findAndModify writes are recorded (RecordingBackend, MongodOplog; docs/backends.md).
        // MONGLOCK_JAVA_OPLOG=off runs the server as it ran before it had one (no change streams).
        if (!"off".equals(System.getenv("MONGLOCK_JAVA_OPLOG"))) {
            backend.enableOplog();
            trimOplog(backend);
        }
        InetSocketAddress address;
        Runnable stop;
        if (awaitData) {
            ThreadPerConnectionServer server = new ThreadPerConnectionServer(backend);
            address = server.bind("127.0.0.1", port);
            stop = server::shutdownNow;
        } else {
            MongoServer server = new MongoServer(backend);
            server.bind("127.0.0.1", port);
            address = server.getLocalAddress();
            stop = server::shutdownNow;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(stop));
        System.out.println("READY " + address.getPort());
        System.out.flush();
        while (System.in.read() != -1) {
            // keep running until stdin closes
        }
        stop.run();
        System.exit(0);
    }

    /** How much history the oplog keeps (ms): a real oplog is capped; mongo-java-server's grows forever and every getMore of a change stream scans it whole. */
    static final long OPLOG_WINDOW_MS = 1_000;

    /** Drops oplog entries older than {@link #OPLOG_WINDOW_MS}, five times a second, as a capped oplog would. */
    static void trimOplog(RecordingBackend backend) {
        Thread trimmer = new Thread(() -> {
            while (true) {
                try {
                    Thread.sleep(200);
                    backend.trimOplog(new BsonTimestamp(Instant.now().minusMillis(OPLOG_WINDOW_MS), 0));
                } catch (InterruptedException e) {
                    return;
                } catch (RuntimeException e) {
                    System.err.println("oplog trim failed: " + e);
                }
            }
        }, "oplog-trimmer");
        trimmer.setDaemon(true);
        trimmer.start();
    }
}
