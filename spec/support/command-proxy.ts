/**
 * A TCP proxy in front of the test server that passes everything through and notes the name of
 * each command its clients send (OP_MSG) and when, and how many client connections are open:
 * what a client process sends, seen from outside it. It can hold back the replies to one kind of
 * command (a slow server or network for that command).
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { BSON, type Document } from 'mongodb';

/** A command a client sent through the proxy. */
export interface SeenCommand {
  readonly name: string;
  /** performance.now() when its message had arrived whole. */
  readonly at: number;
  /** Its reply is held back ({@link CommandProxy.slowReplies}). */
  readonly slowed: boolean;
}

const OP_MSG = 2013;

/** The proxy; {@link uri} is where clients connect. */
export class CommandProxy {
  readonly commands: SeenCommand[] = [];
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  private port = 0;
  /** Replies to the commands `match` picks reach the client `ms` late. */
  slowReplies: { readonly match: (command: Document) => boolean; readonly ms: number } | undefined;

  constructor(private readonly target: { readonly host: string; readonly port: number }) {}

  /** Starts listening on 127.0.0.1 (any free port). */
  async start(): Promise<void> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** A connection string to the server through the proxy. */
  get uri(): string {
    return `mongodb://127.0.0.1:${this.port}/?directConnection=true`;
  }

  /** Client connections still open. */
  get openConnections(): number {
    return this.sockets.size;
  }

  /** Closes every connection and stops listening. */
  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    const upstream = connect(this.target.port, this.target.host);
    this.sockets.add(client);
    /** Request ids (of this connection) whose replies are held back. */
    const slow = new Set<number>();
    /** Replies go out in order: one held back delays those behind it. */
    let sending = Promise.resolve();
    messagesOf(client, (message) => {
      const command = commandOf(message);
      if (command) {
        const slowed = this.slowReplies?.match(BSON.deserialize(command.body)) ?? false;
        if (slowed) slow.add(message.readInt32LE(4));
        this.commands.push({ name: command.name, at: performance.now(), slowed });
      }
      if (upstream.writable) upstream.write(message);
    });
    messagesOf(upstream, (message) => {
      const delay = slow.delete(message.readInt32LE(8)) ? (this.slowReplies?.ms ?? 0) : 0;
      sending = sending.then(async () => {
        if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
        if (client.writable) client.write(message);
      });
    });
    const end = (): void => {
      this.sockets.delete(client);
      client.destroy();
      upstream.destroy();
    };
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }
}

/** The command of an OP_MSG: its name, the first key of its body section (kind 0, right after the flag bits), and that section's BSON. */
function commandOf(message: Buffer): { name: string; body: Buffer } | undefined {
  if (message.length < 27 || message.readInt32LE(12) !== OP_MSG || message[20] !== 0) return undefined;
  const end = message.indexOf(0, 26);
  if (end <= 26) return undefined;
  return { name: message.toString('utf8', 26, end), body: message.subarray(21, 21 + message.readInt32LE(21)) };
}

/** Calls `each` with every whole wire-protocol message `socket` receives. */
function messagesOf(socket: Socket, each: (message: Buffer) => void): void {
  let pending = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 4 && pending.length >= pending.readInt32LE(0)) {
      const length = pending.readInt32LE(0);
      each(pending.subarray(0, length));
      pending = pending.subarray(length);
    }
  });
}
