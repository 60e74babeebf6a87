import { createServer, connect, type Server, type Socket } from 'node:net';
import { BSON } from 'mongodb';

/** Write commands: on a replica set, each waits for its write concern before the reply. */
const WRITES = new Set(['insert', 'update', 'delete', 'findAndModify', 'findandmodify']);
const OP_MSG = 2013;

/**
 * A model of a replica set's majority commit in front of a single server: a TCP proxy that
 * understands MongoDB's wire protocol (OP_MSG) and holds the reply to every write sent with a
 * majority write concern for `delayMs`, as a replica set's primary holds it until a majority has
 * the write. That is `w: 'majority'` or a number of members of 2 or more, and a write sent with no
 * write concern (the implicit default on a replica set since MongoDB 5.0 is majority), refused
 * and no-op writes included; `w: 1` replies at once. Reads pass straight through.
 * Test and benchmark infrastructure.
 */
export class MajorityProxy {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;
  /** Writes whose reply was held, and all writes seen. */
  readonly counts = { majority: 0, writes: 0 };

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
    readonly delayMs: number,
  ) {}

  /** The URI to give the driver instead of the server's. */
  uri(): string {
    return `mongodb://127.0.0.1:${this.port}/?directConnection=true`;
  }

  async start(): Promise<void> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    const upstream = connect(this.targetPort, this.targetHost);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.setNoDelay(true);
      socket.once('close', () => {
        this.sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
      socket.on('error', () => undefined);
    }
    const held = new Set<number>();
    // Requests: note which are majority writes, by request id.
    this.frames(client, (frame) => {
      if (this.isMajorityWrite(frame)) held.add(frame.readInt32LE(4));
      upstream.write(frame);
    });
    // Replies, in order: a held one (and everything after it) waits for its delay.
    let queue = Promise.resolve();
    this.frames(upstream, (frame) => {
      const responseTo = frame.readInt32LE(8);
      const hold = held.delete(responseTo) && this.delayMs > 0;
      queue = queue.then(() => (hold ? new Promise<void>((resolve) => setTimeout(resolve, this.delayMs)) : undefined)).then(() => {
        if (client.writable) client.write(frame);
      });
    });
  }

  /** Calls `onFrame` with each whole wire-protocol message read from `socket`. */
  private frames(socket: Socket, onFrame: (frame: Buffer) => void): void {
    let buffered: Buffer = Buffer.alloc(0);
    socket.on('data', (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      while (buffered.length >= 4) {
        const length = buffered.readInt32LE(0);
        if (buffered.length < length) break;
        onFrame(buffered.subarray(0, length));
        buffered = buffered.subarray(length);
      }
    });
  }

  private isMajorityWrite(frame: Buffer): boolean {
    if (frame.readInt32LE(12) !== OP_MSG) return false;
    // OP_MSG: header (16), flagBits (4), then sections; the command is the kind-0 section.
    let offset = 20;
    while (offset < frame.length) {
      const kind = frame.readUInt8(offset);
      if (kind === 0) {
        const size = frame.readInt32LE(offset + 1);
        const command = BSON.deserialize(frame.subarray(offset + 1, offset + 1 + size), { promoteValues: false });
        const name = Object.keys(command)[0] ?? '';
        if (!WRITES.has(name)) return false;
        this.counts.writes++;
        const w = (command.writeConcern as { w?: unknown } | undefined)?.w;
        const majority = w === undefined || w === 'majority' || (typeof w === 'number' && w >= 2) || (typeof w === 'object' && w !== null && Number(w) >= 2);
        if (majority) this.counts.majority++;
        return majority;
      }
      offset += 1 + frame.readInt32LE(offset + 1); // kind 1: a document sequence, skipped
    }
    return false;
  }
}
