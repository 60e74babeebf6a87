/**
 * A checkout hands the client the JSON of a live lock only: one released while the handler ran
 * (`maxHold` passed, or the lease was lost) is answered with the error a commit gets in the same
 * case, and the client never holds a "checked-out" lock another client holds too.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Collection, Document } from 'mongodb';
import { commit, writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, stopServers } from '../../support/hapi-server';

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once `signal` aborts, or after `ms`. */
const abortedOrAfter = (signal: AbortSignal, ms: number): Promise<void> =>
  signal.aborted ? Promise.resolve() : Promise.race([new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true })), sleep(ms)]);

/** The status and body of a POST over HTTP. */
async function post(url: string): Promise<{ status: number; body: { id?: string; message?: string } }> {
  const response = await fetch(url, { method: 'POST' });
  return { status: response.status, body: (await response.json()) as { id?: string; message?: string } };
}

describe('hapi: a checkout hands out a live lock only', () => {
  afterEach(stopServers);

  const cases = [
    {
      name: 'maxHold passed while the handler ran',
      expected: { status: 500, message: 'An internal server error occurred' }, // boom hides a 500's message (MaxHoldExceeded)
      settings: { maxHold: 200 },
      // Ignores its signal: maxHold releases the lock meanwhile.
      handler: () => async (request: Hapi.Request) => (await sleep(800), lockOf(request).lock),
    },
    {
      name: 'the lease was lost while the handler ran (the lock force-released elsewhere)',
      expected: { status: 409, message: 'LockNotFound' },
      settings: { locktimeout: 1_000 },
      handler: (collection: Collection<Document>) => async (request: Hapi.Request) => {
        const { lock, signal } = lockOf(request);
        await writeLock({ collection }).release(byId(request)); // v2's forced release, proof-less
        await abortedOrAfter(signal, 3_000); // the next extension is refused: the signal aborts; the handler returns the lock all the same
        return lock;
      },
    },
  ];
  for (const { name, expected, settings, handler } of cases) {
    it(`${name}: the client is answered the error a commit gets, not the lock's JSON, and a second checkout at once is the only holder`, async function () {
      this.timeout(20_000);
      const collection = await freshCollection([{ _id: 'd' }, { _id: 'e' }]);
      const lock = writeLock({ collection, locktimeout: 5_000 });
      const server = await makeServer((s) => {
        s.route({ method: 'POST', path: '/drafts/{id}/checkout', options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout', ...settings } }, handler: handler(collection) } });
        // The same case, the handler committing instead.
        const committing: Hapi.Lifecycle.Method = async (request) => (await handler(collection)(request), commit({ $set: { edited: true } }, 'committed'));
        s.route({ method: 'POST', path: '/drafts/{id}/commit', options: { plugins: { monglock: { lock, filter: byId, ...settings } }, handler: committing } });
        s.route({ method: 'POST', path: '/drafts/{id}/quick', options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout' } }, handler: (request) => lockOf(request).lock } });
      });
      await server.start();
      const url = `http://127.0.0.1:${server.info.port}/drafts/d`;
      const first = await post(`${url}/checkout`);
      const second = await post(`${url}/quick`);
      const held = await heldIds(collection, 'd');
      expect({ first: { status: first.status, message: first.body.message, handedOut: first.body.id !== undefined }, second: second.status }, 'the answers of the two checkouts').to.deep.equal({
        first: { ...expected, handedOut: false },
        second: 200,
      });
      expect(held, 'the second checkout holds the document alone').to.deep.equal([second.body.id]);
      const committed = await post(`http://127.0.0.1:${server.info.port}/drafts/e/commit`);
      expect({ status: committed.status, message: committed.body.message }, 'what a commit gets in the same case').to.deep.equal(expected);
    });
  }

  it("a pre method's takeover that answers the lock's JSON hands the lock over (kept for the client); one that answers something else releases it", async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'd' }, { _id: 'e' }]);
    const lock = writeLock({ collection, locktimeout: 5_000 });
    const takeover = (answer: (request: Hapi.Request) => unknown): Hapi.ServerRoute['options'] => ({
      pre: [{ method: (request, h) => h.response(answer(request) as object).takeover() }],
      plugins: { monglock: { lock, filter: byId, mode: 'checkout' } },
      handler: () => 'never',
    });
    const server = await makeServer((s) => {
      s.route({ method: 'POST', path: '/drafts/{id}/checkout', options: takeover((request) => ({ lock: lockOf(request).lock, via: 'pre' })) });
      s.route({ method: 'POST', path: '/drafts/{id}/cached', options: takeover(() => ({ cached: true })) });
    });
    await server.start();
    const handedOut = await fetch(`http://127.0.0.1:${server.info.port}/drafts/d/checkout`, { method: 'POST' });
    const { lock: json } = (await handedOut.json()) as { lock: { id: string } };
    const other = await post(`http://127.0.0.1:${server.info.port}/drafts/e/cached`);
    await sleep(300); // the response event's work is done
    expect({ handedOut: handedOut.status, other: other.status, held: { d: await heldIds(collection, 'd'), e: await heldIds(collection, 'e') } }, 'the answers, and who holds each document').to.deep.equal({
      handedOut: 200,
      other: 200,
      held: { d: [json.id], e: [] },
    });
  });
});
