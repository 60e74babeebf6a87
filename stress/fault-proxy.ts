import { createServer, connect, type Server, type Socket } from 'node:net';

/** What the proxy does to traffic. */
export type Fault =
  | { kind: 'none' }
  /** Every chunk, both ways, is held back this many ms. */
  | { kind: 'latency'; ms: number }
  /** New connections are closed at once and open ones are closed (FIN). */
  | { kind: 'drop' }
  /** Open connections are reset (RST); new ones too. */
  | { kind: 'reset' }
  /** Connections stay open but nothing passes, either way (a partition). */
  | { kind: 'blackhole' }
  /** Requests reach the server, replies are swallowed (writes applied, never acknowledged). */
  | { kind: 'lose-replies' };

/**
 * A TCP proxy between the driver and MongoDB on 127.0.0.1 that injects faults: latency, drops,
 * resets, black holes and lost replies. Test infrastructure.
 */
export class FaultProxy {
  private fault: Fault = { kind: 'none' };
  private readonly pairs = new Set<{ client: Socket; upstream: Socket }>();
  private readonly sockets = new Set<Socket>();
  private server: Server | undefined;
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  /** The URI to give the driver instead of the server's. */
  uri(database = ''): string {
    return `mongodb://127.0.0.1:${this.port}/${database}?directConnection=true`;
  }

  async start(): Promise<void> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** Switches the fault; `drop` and `reset` also act on the open connections. */
  set(fault: Fault): void {
    this.fault = fault;
    if (fault.kind === 'drop' || fault.kind === 'reset') {
      for (const pair of this.pairs) this.close(pair, fault.kind === 'reset');
    }
  }

  async stop(): Promise<void> {
    for (const pair of this.pairs) this.close(pair, true);
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    this.sockets.add(client);
    client.once('close', () => this.sockets.delete(client));
    if (this.fault.kind === 'drop') return void client.destroy();
    if (this.fault.kind === 'reset') return void client.resetAndDestroy();
    const upstream = connect(this.targetPort, this.targetHost);
    const pair = { client, upstream };
    this.pairs.add(pair);
    const forward = (from: Socket, to: Socket, isReply: boolean) => (chunk: Buffer) => {
      const fault = this.fault;
      if (fault.kind === 'blackhole' || (fault.kind === 'lose-replies' && isReply)) return;
      if (fault.kind === 'latency') setTimeout(() => to.writable && to.write(chunk), fault.ms);
      else if (to.writable) to.write(chunk);
    };
    client.on('data', forward(client, upstream, false));
    upstream.on('data', forward(upstream, client, true));
    const end = (): void => this.close(pair, false);
    for (const socket of [client, upstream]) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }

  private close(pair: { client: Socket; upstream: Socket }, reset: boolean): void {
    if (!this.pairs.delete(pair)) return;
    for (const socket of [pair.client, pair.upstream]) {
      if (reset && !socket.destroyed) socket.resetAndDestroy();
      else socket.destroy();
    }
  }
}
