/**
 * A driver error of a closed client can come after the command was sent and applied, and is then
 * never reported as "nothing was sent". A retryable write selects a server and checks out a connection
 * AGAIN for its retry: in node_modules/mongodb/lib/operations/execute_operation.js `tryOperation`
 * (6.21) and node_modules/mongodb7/lib/operations/execute_operation.js (7.x), after the first
 * attempt fails with a retryable error (a network error after the server applied the write), the
 * retry's `topology.selectServer(...)` is outside the try; when the client is closed while it waits
 * (the server is Unknown after the network error), `Topology.close` drains the wait queue with
 * `MongoTopologyClosedError`, and that error, not the first attempt's, reaches the caller. (A retry
 * whose connection check-out meets the closed pool raises `MongoPoolClosedError` the same way: it
 * replaces the first error since it has no NoWritesPerformed label.) So a commit that landed is
 * not reported `applied: false` (test 1), and an acquisition (here a resource lock without ttl,
 * which never expires) hands back the lock it may have written in `err.lock` (test 2).
 *
 * Retryable writes need a server that supports sessions and is not a standalone (any replica set,
 * which is what users run). mongo-java-server reports a standalone without sessions, so this test
 * talks to it through a proxy that adds `setName` and `logicalSessionTimeoutMinutes` to its hello
 * replies (the driver then sends `lsid`/`txnNumber`, which the fallback ignores): the driver
 * behaves as against a one-node replica set. On real mongod the same sequence needs no rewriting.
 */
import { expect } from 'chai';
import { BSON, MongoClient } from 'mongodb';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { resourceLocks, writeLock } from '../../lib';
import { freshCollection, mongoBackend, sleep } from '../support/fixture';

type Mode = 'pass' | 'lose-replies' | 'reset';

/** A TCP proxy that makes the server look like a replica-set primary with sessions, and can lose replies or reset every connection. */
class ReplicaSetFacade {
  mode: Mode = 'pass';
  port = 0;
  private server: Server | undefined;
  private readonly pairs = new Set<[Socket, Socket]>();

  constructor(
    private readonly host: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    this.server = createServer((client) => this.accept(client));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  set(mode: Mode): void {
    this.mode = mode;
    if (mode === 'reset') for (const pair of [...this.pairs]) this.close(pair);
  }

  async stop(): Promise<void> {
    for (const pair of [...this.pairs]) this.close(pair);
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    if (this.mode === 'reset') return void client.resetAndDestroy();
    const upstream = connect(this.targetPort, this.host);
    const pair: [Socket, Socket] = [client, upstream];
    this.pairs.add(pair);
    client.on('data', (chunk: Buffer) => {
      if (this.mode !== 'reset' && upstream.writable) upstream.write(chunk);
    });
    let pending = Buffer.alloc(0);
    upstream.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= pending.readInt32LE(0)) {
        const length = pending.readInt32LE(0);
        const message = pending.subarray(0, length);
        pending = pending.subarray(length);
        if (this.mode === 'pass' && client.writable) client.write(this.rewrite(message));
      }
    });
    const end = (): void => this.close(pair);
    for (const socket of pair) {
      socket.on('error', end);
      socket.on('close', end);
    }
  }

  private close(pair: [Socket, Socket]): void {
    if (!this.pairs.delete(pair)) return;
    for (const socket of pair) if (!socket.destroyed) socket.resetAndDestroy();
  }

  /** Adds replica-set and session fields to a hello reply (OP_REPLY to the handshake, OP_MSG after). */
  private rewrite(message: Buffer): Buffer {
    const opCode = message.readInt32LE(12);
    const start = opCode === 1 ? 36 : opCode === 2013 && message[20] === 0 ? 21 : -1;
    if (start < 0) return message;
    const docLength = message.readInt32LE(start);
    const doc = BSON.deserialize(message.subarray(start, start + docLength));
    if (doc.maxWireVersion === undefined || doc.ok !== 1) return message;
    const me = `127.0.0.1:${this.port}`;
    const rewritten = Buffer.from(
      BSON.serialize({ ...doc, setName: 'rs0', hosts: [me], me, primary: me, isWritablePrimary: true, logicalSessionTimeoutMinutes: 30 }),
    );
    const out = Buffer.concat([message.subarray(0, start), rewritten, message.subarray(start + docLength)]);
    out.writeInt32LE(out.length, 0);
    return out;
  }
}

describe('a "closed" error after the command was sent', () => {
  let facade: ReplicaSetFacade | undefined;
  let client: MongoClient | undefined;
  afterEach(async () => {
    facade?.set('pass');
    await client?.close().catch(() => undefined);
    await facade?.stop();
    facade = undefined;
    client = undefined;
  });

  it('a commit applied by the server, whose retry meets a client closed meanwhile, is not reported "not applied"', async function () {
    this.timeout(30_000);
    const raw = await freshCollection([{ _id: 'acc', balance: 100 }]);
    const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    facade = new ReplicaSetFacade(hostname, Number(port));
    await facade.start();
    client = new MongoClient(`mongodb://127.0.0.1:${facade.port}/?directConnection=true`, { serverSelectionTimeoutMS: 20_000, heartbeatFrequencyMS: 500 });
    await client.connect();
    const types = [...(client as unknown as { topology: { description: { servers: Map<string, { type: string }> } } }).topology.description.servers.values()].map((s) => s.type);
    expect(types, 'the driver sees a replica-set primary (retryable writes)').to.deep.equal(['RSPrimary']);

    const accounts = writeLock({ collection: client.db(raw.dbName).collection(raw.collectionName), locktimeout: 20_000, timeout: 15_000 });
    const handle = await accounts.acquire({ _id: 'acc' });

    // The commit reaches the server and is applied; its reply is lost.
    facade.set('lose-replies');
    const committing = handle.release({ update: { $inc: { balance: -30 } } }).then(
      () => 'resolved' as const,
      (error: Error & { data?: { applied?: unknown }; cause?: Error }) => error,
    );
    for (let i = 0; i < 200 && (await raw.findOne({ _id: 'acc' as never }))?.balance !== 70; i++) await sleep(25);
    expect((await raw.findOne({ _id: 'acc' as never }))?.balance, 'the commit landed').to.equal(70);

    // The connection drops (a network error: the driver retries the write, waiting for the server to come back)...
    facade.set('reset');
    await sleep(300);
    // ...and the application shuts down meanwhile.
    await client.close();
    const outcome = await committing;
    if (outcome !== 'resolved') console.log(`      reported: ${outcome.message} (cause: ${outcome.cause?.name}; applied: ${String(outcome.data?.applied)})`);
    expect(outcome === 'resolved' || outcome.data?.applied !== false, 'the update landed, yet the caller hears it was not applied').to.equal(true);
  });

  it('a resource lock without ttl written by the server, whose retry meets a client closed meanwhile, is not reported as "nothing was sent" without err.lock', async function () {
    this.timeout(30_000);
    const raw = await freshCollection();
    const { hostname, port } = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    facade = new ReplicaSetFacade(hostname, Number(port));
    await facade.start();
    client = new MongoClient(`mongodb://127.0.0.1:${facade.port}/?directConnection=true`, { serverSelectionTimeoutMS: 20_000, heartbeatFrequencyMS: 500 });
    await client.connect();
    const locks = resourceLocks({ collection: client.db(raw.dbName).collection(raw.collectionName), timeout: 15_000 });
    await locks.xlock('nightly-report', 'warm-up'); // the resource document exists from now on
    await locks.unlock('warm-up');

    facade.set('lose-replies');
    const locking = locks.xlock('nightly-report', 'job-7').then(
      () => 'resolved' as const,
      (error: Error & { lock?: unknown; cause?: Error }) => error,
    );
    const held = async (): Promise<boolean> => ((await raw.findOne({ _id: 'nightly-report' as never }))?.lock?.tags?.exclusive ?? []).some((entry: { group: string }) => entry.group === 'job-7');
    for (let i = 0; i < 200 && !(await held()); i++) await sleep(25);
    expect(await held(), 'the lock (without expiry) was written').to.equal(true);

    facade.set('reset');
    await sleep(300);
    await client.close();
    const outcome = await locking;
    expect(outcome).not.to.equal('resolved');
    const error = outcome as Error & { lock?: unknown; cause?: Error };
    console.log(`      reported: ${error.message} (cause: ${String((error as { cause?: Error }).cause?.name)}; err.lock: ${error.lock === undefined ? 'none' : 'given'})`);
    expect(await held(), 'held, with no expiry').to.equal(true);
    expect(
      error.lock !== undefined || /may have been written/.test(error.message),
      'a lock without expiry was written, yet the caller hears that nothing was sent and gets nothing to release',
    ).to.equal(true);
  });
});
