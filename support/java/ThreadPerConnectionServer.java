import de.bwaldvogel.mongo.MongoBackend;
import de.bwaldvogel.mongo.wire.MongoDatabaseHandler;
import de.bwaldvogel.mongo.wire.MongoExceptionHandler;
import de.bwaldvogel.mongo.wire.MongoWireMessageEncoder;
import de.bwaldvogel.mongo.wire.MongoWireProtocolHandler;
import de.bwaldvogel.mongo.wire.MongoWireReplyEncoder;
import io.netty.bootstrap.ServerBootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.group.ChannelGroup;
import io.netty.channel.group.DefaultChannelGroup;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.util.concurrent.DefaultEventExecutor;
import io.netty.util.concurrent.GlobalEventExecutor;
import java.net.InetSocketAddress;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * mongo-java-server's MongoServer wiring (the same handlers, in the same order), except that each
 * connection's commands run on a thread of that connection, as mongod runs them, instead of on the
 * I/O thread it shares with other connections: a `getMore` that waits for an event
 * ({@link RecordingBackend#handleGetMore}) then holds up only its own connection. Test
 * infrastructure only.
 */
@SuppressWarnings("deprecation") // netty 4.2 deprecates NioEventLoopGroup and addLast(group, handler); mongo-java-server 1.47.0 uses them too
final class ThreadPerConnectionServer {
    private final MongoBackend backend;
    private final EventLoopGroup boss = new NioEventLoopGroup(1);
    private final EventLoopGroup workers = new NioEventLoopGroup();
    private final ChannelGroup clients = new DefaultChannelGroup("mongodb-channels", GlobalEventExecutor.INSTANCE);
    private final AtomicInteger connections = new AtomicInteger();
    private Channel listening;

    ThreadPerConnectionServer(MongoBackend backend) {
        this.backend = backend;
    }

    /** Listens on `host`:`port` (0: any free port) and returns the address bound. */
    InetSocketAddress bind(String host, int port) {
        listening = new ServerBootstrap()
            .group(boss, workers)
            .channel(NioServerSocketChannel.class)
            .option(ChannelOption.SO_BACKLOG, 100)
            .localAddress(host, port)
            .childOption(ChannelOption.TCP_NODELAY, Boolean.TRUE)
            .childHandler(new ChannelInitializer<SocketChannel>() {
                @Override
                public void initChannel(SocketChannel channel) {
                    String name = "mongo-connection-" + connections.incrementAndGet();
                    DefaultEventExecutor own = new DefaultEventExecutor(runnable -> {
                        Thread thread = new Thread(runnable, name);
                        thread.setDaemon(true);
                        return thread;
                    });
                    channel.pipeline().addLast(new MongoWireReplyEncoder());
                    channel.pipeline().addLast(new MongoWireMessageEncoder());
                    channel.pipeline().addLast(new MongoWireProtocolHandler());
                    channel.pipeline().addLast(own, new MongoDatabaseHandler(backend, clients));
                    channel.pipeline().addLast(own, new MongoExceptionHandler());
                    // the quiet period lets the handler see the channel close (channelInactive) first
                    channel.closeFuture().addListener(closed -> own.shutdownGracefully(200, 5_000, TimeUnit.MILLISECONDS));
                }
            })
            .bind().syncUninterruptibly().channel();
        return (InetSocketAddress) listening.localAddress();
    }

    /** Stops listening, closes every connection and the backend. */
    void shutdownNow() {
        if (listening != null) listening.close().syncUninterruptibly();
        clients.close().syncUninterruptibly();
        boss.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        workers.shutdownGracefully(0, 1, TimeUnit.SECONDS);
        backend.close();
    }
}
