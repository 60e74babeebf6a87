/**
 * The change feed shares its client's connection pool with the lock's own commands. Its `getMore`
 * waits on a real mongod up to `maxAwaitTimeMS` (1 s) for a change, holding a connection all
 * that time; mongo-java-server answers at once, so a TCP proxy here holds each `getMore` for that
 * second before passing it on, as mongod would hold its reply (what only the manual vouches for:
 * a tailable awaitData cursor's getMore blocks up to maxTimeMS when no data is there).
 */
import { expect } from 'chai';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { MongoClient, type CommandFailedEvent, type CommandStartedEvent, type CommandSucceededEvent, type Document } from 'mongodb';
import { writeLock } from '../../lib';
import { freshCollection, mongoBackend, newClient, requireCapability, sleep } from '../support/fixture';

const OP_MSG = 2013;

/** The command name of an OP_MSG `message` (its body's first key), if it is one. */
function commandOf(message: Buffer): string | undefined {
  if (message.length < 26 || message.readInt32LE(12) !== OP_MSG || message[20] !== 0) return undefined;
  const end = message.indexOf(0, 26);
  return end > 26 ? message.toString('utf8', 26, end) : undefined;
}

/** A proxy to `target` that holds each `getMore` a client sends for `holdMs` before passing it on. */
async function getMoreHoldingProxy(target: { host: string; port: number }, holdMs: number): Promise<{ uri: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    sockets.add(client).add(upstream);
    let pending = Buffer.alloc(0);
    let chain: Promise<void> = Promise.resolve();
    client.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= pending.readInt32LE(0)) {
        const message = pending.subarray(0, pending.readInt32LE(0));
        pending = pending.subarray(message.length);
        const held = commandOf(message) === 'getMore' ? holdMs : 0;
        chain = chain.then(() => (held ? sleep(held) : undefined)).then(() => void upstream.write(message));
      }
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    uri: `mongodb://127.0.0.1:${port}/?directConnection=true`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('the change feed and its client\'s connection pool', function () {
  this.timeout(60_000);

  it('with maxPoolSize 1, a lock call of a process whose waiter waits is not held up behind the change stream\'s getMore (it answers as fast as without change streams)', async function () {
    requireCapability(this, 'changeStreams');
    const address = new URL(mongoBackend().uri.replace(/^mongodb:/, 'http:'));
    const proxy = await getMoreHoldingProxy({ host: address.hostname, port: Number(address.port) }, 1_000);
    try {
      const collection = await freshCollection([{ _id: 1 }, { _id: 2 }]);
      const proxied = await MongoClient.connect(proxy.uri, { maxPoolSize: 1 });
      try {
        const side = proxied.db(collection.dbName).collection(collection.collectionName);
        const holder = writeLock({ collection, locktimeout: 20_000 });
        const slowest: Record<string, number> = {};
        for (const changeStreams of [false, true]) {
          const lock = writeLock({ collection: side, locktimeout: 20_000, changeStreams });
          const held = await holder.acquire({ _id: 1 });
          const waiting = lock.acquire({ _id: 1 }, { wait: 20_000 });
          await sleep(300); // the waiter waits (with its change stream open, if any)
          let worst = 0;
          for (let i = 0; i < 5; i++) {
            const started = performance.now();
            const other = await lock.acquire({ _id: 2 }); // a free document, no wait
            await other.release();
            worst = Math.max(worst, performance.now() - started);
            await sleep(50);
          }
          slowest[`changeStreams ${changeStreams}`] = Math.round(worst);
          await held.release();
          await (await waiting).release();
        }
        const what = `slowest acquire + release of a free document while a waiter waits: ${JSON.stringify(slowest)} ms`;
        console.log(`      ${what}`);
        expect(slowest['changeStreams true'], what).to.be.below(Math.max(250, 3 * slowest['changeStreams false']!));
      } finally {
        await proxied.close();
      }
    } finally {
      await proxy.close();
    }
  });

  it('a stream reopened again and again (waiters coming and going on other documents) holds at most two getMores at once: the one it drops is ended, not left waiting on a connection', async function () {
    requireCapability(this, 'changeStreams');
    const steady = 40;
    const churned = 40;
    const collection = await freshCollection(Array.from({ length: steady + churned }, (_, i) => ({ _id: i })));
    const holder = writeLock({ collection, locktimeout: 60_000 });
    const held = await Promise.all(Array.from({ length: steady + churned }, (_, i) => holder.acquire({ _id: i })));
    const client = await newClient({ monitorCommands: true });
    const inFlight = new Set<number>();
    let most = 0;
    let opened = 0;
    client.on('commandStarted', (event: CommandStartedEvent) => {
      if (event.commandName === 'aggregate' && (event.command.pipeline as Document[])[0]?.$changeStream) opened++;
      if (event.commandName !== 'getMore') return;
      inFlight.add(event.requestId);
      most = Math.max(most, inFlight.size);
    });
    const done = (event: CommandSucceededEvent | CommandFailedEvent): void => void inFlight.delete(event.requestId);
    client.on('commandSucceeded', done).on('commandFailed', done);
    const lock = writeLock({ collection: client.db(collection.dbName).collection(collection.collectionName), locktimeout: 10_000 });
    const waiting = Array.from({ length: steady }, (_, i) => lock.acquire({ _id: i }, { wait: 30_000 }));
    await sleep(2_000);
    // A waiter every 100 ms for another held document, giving up after 250 ms: the stream is reopened about once per RESCOPE_MS.
    let next = 0;
    const churn = setInterval(() => void lock.acquire({ _id: steady + (next++ % churned) }, { wait: 250 }).catch(() => undefined), 100);
    [most, opened] = [inFlight.size, 0];
    await sleep(3_000);
    clearInterval(churn);
    const what = `${opened} streams opened in 3 s; at most ${most} getMores in flight at once`;
    console.log(`      ${what}`);
    expect(most, what).to.be.at.most(2);
    await Promise.all(held.map((handle) => handle.release()));
    await Promise.all((await Promise.all(waiting)).map((handle) => handle.release()));
  });
});
