import de.bwaldvogel.mongo.MongoServer;
import de.bwaldvogel.mongo.backend.memory.MemoryBackend;
import java.net.InetSocketAddress;

/**
 * Starts mongo-java-server (in-memory backend) on 127.0.0.1 and the given port (0 = any free
 * port), prints "READY <port>", and stops when its standard input closes (the parent died or
 * asked it to stop) or on SIGTERM. Test infrastructure only.
 */
public class Launcher {
    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 0;
        MongoServer server = new MongoServer(new MemoryBackend());
        server.bind("127.0.0.1", port);
        InetSocketAddress address = server.getLocalAddress();
        Runtime.getRuntime().addShutdownHook(new Thread(server::shutdownNow));
        System.out.println("READY " + address.getPort());
        System.out.flush();
        while (System.in.read() != -1) {
            // keep running until stdin closes
        }
        server.shutdownNow();
        System.exit(0);
    }
}
