/**
 * A route's lock is free before its answer reaches the client: a client that waits for each answer
 * before its next request is never refused by the lock its own previous request held (routes
 * without `wait`, the default). The defect guarded against: the lock was released after the
 * response had gone out, so the next request could arrive first and get 409 LockAlreadyTaken.
 */
import { request as httpRequest } from 'node:http';
import { Readable } from 'node:stream';
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commit, writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, released, stopServers } from '../../support/hapi-server';

const SEQUENTIAL = 300;
const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });

/** One answer: its status and, for a 409, its message (LockAlreadyTaken is the lock's refusal). */
interface Answer {
  readonly path: string;
  readonly status: number;
  readonly message?: string;
}

/** The answers the lock refused, as `#index path`. */
function refusals(answers: readonly Answer[]): string[] {
  return answers.flatMap((answer, index) => (answer.status === 409 ? [`#${index} ${answer.path}: ${answer.message ?? ''}`] : []));
}

/** A stream body of three chunks that records, as it is read, whether document `id` is locked. */
function recordingStream(collection: Collection<Document>, id: string, lockedWhileRead: boolean[], body = 'a,b,c'): Readable {
  return Readable.from(
    (async function* () {
      for (const part of body.split(/(?<=,)/)) {
        lockedWhileRead.push((await heldIds(collection, id)).length === 1);
        yield Buffer.from(part);
      }
    })(),
    { objectMode: false },
  );
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The status of a GET on its own connection (the client's first one still waits for the server to end its answer). */
function onNewConnection(port: number, path: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, agent: false, headers: { connection: 'close', ...headers } }, (res) => {
      res.destroy(); // the status is all it needs
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * A checkout route (on a fresh document whose state is `archived`) answered by `handler`, whose
 * lock's writes after the acquisition are held back until the client has the answer (or 1 s
 * passed): resolves the order of the two, the status and the entries left.
 */
async function checkoutAnswerAndRelease(handler: Hapi.Lifecycle.Method): Promise<{ order: string[]; status: number; held: number }> {
  const collection = await freshCollection([{ _id: 'd', state: 'archived' }]);
  const order: string[] = [];
  let answered!: () => void;
  const gate = Promise.race([new Promise<void>((resolve) => (answered = resolve)), sleep(1_000)]);
  const acquisition = (method: string, n: number): boolean => method === 'findOneAndUpdate' && n === 1;
  const slow = delayedCollection(collection, {
    request: (method, n) => (acquisition(method, n) ? undefined : gate),
    reply: (method, n) => {
      if (!acquisition(method, n)) order.push('the release landed');
      return undefined;
    },
  });
  const lock = writeLock({ collection: slow, locktimeout: 10_000 });
  const server = await makeServer((s) =>
    s.route({
      method: 'POST',
      path: '/drafts/{id}/checkout',
      options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout', document: true } }, handler },
    }),
  );
  const response = await server.inject({ method: 'POST', url: '/drafts/d/checkout' });
  order.push('the client had the answer');
  answered();
  await sleep(300);
  return { order, status: response.statusCode, held: (await heldIds(collection, 'd')).length };
}

/** Routes on the counter document: each kind of answer a locked route gives. */
function counterRoutes(server: Hapi.Server, collection: Collection<Document>, lockedWhileRead: boolean[]): void {
  const lock = writeLock({ collection, locktimeout: 10_000 });
  const route = (method: 'GET' | 'POST', path: string, options: Partial<Hapi.RouteOptions>, mode: 'hold' | 'checkout' = 'hold'): void => {
    server.route({ method, path: `/counters/{id}/${path}`, options: { plugins: { monglock: { lock, filter: byId, mode } }, ...options } });
  };
  route('POST', 'inc', {
    handler: async (request) => ({ matched: (await collection.updateOne(lockOf(request).guard(), { $inc: { n: 1 } })).matchedCount }),
  });
  route('POST', 'commit', { handler: () => commit({ $inc: { n: 1 } }, { committed: true }) });
  route('POST', 'refused-by-pre', {
    pre: [
      () => {
        throw Boom.badRequest('no such counter kind');
      },
    ],
    handler: () => 'never',
  });
  route('POST', 'failed', {
    handler: () => {
      throw Boom.badData('the count is odd');
    },
  });
  route(
    'POST',
    'checkout-failed',
    {
      handler: () => {
        throw new Error('the draft could not be loaded');
      },
    },
    'checkout',
  );
  route('GET', 'export', { handler: (request) => recordingStream(collection, request.params.id as string, lockedWhileRead) });
  route('GET', 'export-sized', {
    handler: (request, h) => h.response(recordingStream(collection, request.params.id as string, lockedWhileRead)).header('content-length', '5'),
  });
}

describe('hapi: the lock is free before the answer reaches the client', () => {
  afterEach(stopServers);

  it(`${SEQUENTIAL} sequential fetch calls over HTTP: none is refused by the lock the previous one held`, async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'c', n: 0 }]);
    const server = await makeServer((s) => counterRoutes(s, collection, []));
    await server.start();
    const answers: Answer[] = [];
    for (let i = 0; i < SEQUENTIAL; i++) {
      const response = await fetch(`http://127.0.0.1:${server.info.port}/counters/c/inc`, { method: 'POST' });
      const body = (await response.json()) as { message?: string };
      answers.push({ path: 'inc', status: response.status, ...(body.message !== undefined && { message: body.message }) });
    }
    const refused = refusals(answers);
    expect(refused, `${refused.length} of ${SEQUENTIAL} sequential requests refused by the lock of the one before`).to.deep.equal([]);
    expect(answers.filter((answer) => answer.status !== 200), 'every request answered 200').to.deep.equal([]);
    expect((await collection.findOne({ _id: 'c' as never }))?.n, 'every request incremented under the lock').to.equal(SEQUENTIAL);
  });

  it(`${SEQUENTIAL} sequential injects (a write, a commit, a refusal by a pre method, a failed handler, a failed checkout, a stream): none is refused`, async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 'c', n: 0 }]);
    const lockedWhileRead: boolean[] = [];
    const server = await makeServer((s) => counterRoutes(s, collection, lockedWhileRead));
    const kinds = [
      { method: 'POST', path: 'inc', status: 200 },
      { method: 'POST', path: 'commit', status: 200 },
      { method: 'POST', path: 'refused-by-pre', status: 400 },
      { method: 'POST', path: 'failed', status: 422 },
      { method: 'POST', path: 'checkout-failed', status: 500 },
      { method: 'GET', path: 'export', status: 200 },
    ];
    const answers: Answer[] = [];
    for (let i = 0; i < SEQUENTIAL; i++) {
      const kind = kinds[i % kinds.length]!;
      const response = await server.inject({ method: kind.method, url: `/counters/c/${kind.path}` });
      const message = response.statusCode === 409 ? (JSON.parse(response.payload) as { message: string }).message : undefined;
      answers.push({ path: kind.path, status: response.statusCode, ...(message !== undefined && { message }) });
    }
    const refused = refusals(answers);
    expect(refused, `${refused.length} of ${SEQUENTIAL} sequential injects refused by the lock of the one before`).to.deep.equal([]);
    const unexpected = answers.filter((answer, index) => answer.status !== kinds[index % kinds.length]!.status);
    expect(unexpected, 'every route answered its own status').to.deep.equal([]);
    const increments = (SEQUENTIAL / kinds.length) * 2;
    expect((await collection.findOne({ _id: 'c' as never }))?.n, 'every write and every commit applied once').to.equal(increments);
    expect(lockedWhileRead.length, 'every stream was read').to.equal((SEQUENTIAL / kinds.length) * 3);
    expect(lockedWhileRead.every(Boolean), 'a stream body is read under the lock').to.equal(true);
  });

  it('a stream body (chunked, or with a content-length) is read under the lock, which is free once the client has the whole body', async function () {
    this.timeout(60_000);
    const collection = await freshCollection([{ _id: 's', n: 0 }]);
    const lockedWhileRead: boolean[] = [];
    const server = await makeServer((s) => counterRoutes(s, collection, lockedWhileRead));
    await server.start();
    const heldOnceReceived: string[] = [];
    for (let i = 0; i < 100; i++) {
      const path = i % 2 === 0 ? 'export' : 'export-sized';
      const response = await fetch(`http://127.0.0.1:${server.info.port}/counters/s/${path}`);
      const body = await response.text();
      expect({ status: response.status, body }, `${path} #${i} answered the whole stream`).to.deep.equal({ status: 200, body: 'a,b,c' });
      if ((await heldIds(collection, 's')).length > 0) heldOnceReceived.push(`#${i} ${path}`);
    }
    expect(heldOnceReceived, 'requests whose lock was still held once their client had the whole body').to.deep.equal([]);
    expect(lockedWhileRead.length, 'every stream was read').to.equal(300);
    expect(lockedWhileRead.every(Boolean), 'a stream body is read under the lock').to.equal(true);
  });

  it("onPostHandler extensions and the route's response validation still run under the lock; the next request finds it free", async () => {
    const collection = await freshCollection([{ _id: 'v' }]);
    const seen: Record<string, number> = {};
    const server = await makeServer((s) =>
      s.route({
        method: 'POST',
        path: '/orders/{id}',
        options: {
          plugins: { monglock: { lock: writeLock({ collection }), filter: byId } },
          ext: { onPostHandler: { method: async (request, h) => ((seen.onPostHandler = (await heldIds(collection, request.params.id)).length), h.continue) } },
          response: {
            schema: async (value: unknown) => {
              seen.validation = (await heldIds(collection, 'v')).length;
              return value;
            },
          },
          handler: () => ({ ok: true }),
        },
      }),
    );
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await server.inject({ method: 'POST', url: '/orders/v' })).statusCode);
    expect({ statuses, seen }, 'entries of the lock seen by onPostHandler and response validation').to.deep.equal({ statuses: [200, 200, 200], seen: { onPostHandler: 1, validation: 1 } });
  });

  it('a stream that never ends holds the lock while it is sent, and releases it once the client leaves; a HEAD request, which reads no body, is not refused after it', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'e' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    let events = 0;
    const endless = new Readable({
      read() {
        setTimeout(() => this.push(`data: ${events++}\n\n`), 10);
      },
    });
    const server = await makeServer((s) =>
      s.route({ method: 'GET', path: '/events/{id}', options: { plugins: { monglock: { lock, filter: byId } }, handler: (request) => (request.method === 'head' ? Readable.from(['x'], { objectMode: false }) : endless) } }),
    );
    await server.start();
    const url = `http://127.0.0.1:${server.info.port}/events/e`;
    const client = new AbortController();
    // identity: hapi would gzip the stream and hold its events until the compressor flushes.
    const response = await fetch(url, { signal: client.signal, headers: { 'accept-encoding': 'identity' } });
    const reader = response.body!.getReader();
    await reader.read();
    await reader.read();
    expect(await heldIds(collection, 'e'), 'held while the events are sent').to.have.length(1);
    client.abort();
    await released(collection, 'e');
    expect(endless.destroyed, 'the stream was stopped with the response').to.equal(true);
    for (let i = 0; i < 100; i++) expect((await fetch(url, { method: 'HEAD' })).status, `HEAD #${i}`).to.equal(200);
  });
  it('a range request (206) on a stream body with a content-length: the range is read under the lock, which is free once the client has the whole range, while the rest of the body is still to come', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'f' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    const lockedWhileRead: boolean[] = [];
    let openGate = (): void => undefined;
    let gate = Promise.resolve();
    /** `first`, then (once the gate of its case opens: a slow disk, GridFS) `rest`. */
    const slowFile = (first: string, rest: string): Readable => {
      const opened = gate;
      return Readable.from(
        (async function* () {
          lockedWhileRead.push((await heldIds(collection, 'f')).length === 1);
          yield Buffer.from(first);
          await opened;
          if (rest) yield Buffer.from(rest);
        })(),
        { objectMode: false },
      );
    };
    const route = (path: string, handler: Hapi.Lifecycle.Method): Hapi.ServerRoute => ({ method: 'GET', path: `/files/{id}/${path}`, options: { plugins: { monglock: { lock, filter: byId } }, handler } });
    const server = await makeServer((s) =>
      s.route([
        // hapi cuts the asked range from the route's 200 answer
        route('whole', (_request, h) => h.response(slowFile('abc', 'def')).type('application/octet-stream').header('content-length', '6')),
        // the route answers a part itself: its body is what the client gets
        route('part', (_request, h) => h.response(slowFile('cde', '')).type('application/octet-stream').code(206).header('content-range', 'bytes 2-4/10').header('content-length', '3')),
      ]),
    );
    await server.start();
    try {
      for (const [path, range, expected] of [
        ['whole', 'bytes=0-1', 'ab'],
        ['whole', 'bytes=1-2', 'bc'],
        ['part', undefined, 'cde'],
      ] as const) {
        gate = new Promise<void>((resolve) => (openGate = resolve));
        const headers: Record<string, string> = { 'accept-encoding': 'identity', ...(range && { range }) };
        const first = await fetch(`http://127.0.0.1:${server.info.port}/files/f/${path}`, { headers });
        const body = await first.text();
        const heldOnceAnswered = (await heldIds(collection, 'f')).length;
        const next = await onNewConnection(server.info.port as number, `/files/f/${path}`, headers);
        openGate(); // hapi ends the first answer only once its stream ends: its connection is free again
        await released(collection, 'f', 5_000);
        expect({ status: first.status, body, heldOnceAnswered, next }, `${path} ${range ?? ''}: the answer, the lock entries once its client had it whole, and the status of the next request`).to.deep.equal({
          status: 206,
          body: expected,
          heldOnceAnswered: 0,
          next: 206,
        });
      }
      // the client of a next request may leave before its body is read
      expect(lockedWhileRead.length, 'bodies read (one per case at least)').to.be.at.least(3);
      expect(lockedWhileRead.filter((locked) => !locked), 'bodies read up to the last byte their client got while the lock was free').to.deep.equal([]);
    } finally {
      openGate();
      await released(collection, 'f', 5_000).catch(() => undefined);
    }
  });

  it('a checkout route that refuses with a plain 4xx response (not a boom) releases its lock before the refusal is sent, as a thrown boom does', async function () {
    this.timeout(20_000);
    const archived = (request: Hapi.Request): boolean => lockOf(request).document?.state === 'archived';
    const plain = await checkoutAnswerAndRelease((request, h) => (archived(request) ? h.response({ reason: 'archived' }).code(422) : lockOf(request).lock));
    const thrown = await checkoutAnswerAndRelease((request) => {
      if (archived(request)) throw Boom.badData('archived');
      return lockOf(request).lock;
    });
    const expected = { order: ['the release landed', 'the client had the answer'], status: 422, held: 0 };
    expect({ plain, thrown }, 'the release landed before the client had the 422 answer').to.deep.equal({ plain: expected, thrown: expected });
  });
});
