/**
 * A checkout route whose handler refuses with a plain 4xx response (`h.response(…).code(422)`,
 * not a thrown boom): the lock's JSON never reaches the client, so the plugin releases the lock.
 * docs/hapi.md: a failed checkout answer "releases it before it is sent", so a client that waits
 * for each answer is never refused by the lock of its previous request.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, stopServers } from '../../support/hapi-server';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs one request on a route whose lock's writes after the acquisition are held back until the answer is in (or 1 s passed); resolves the order of the two. */
async function answerAndRelease(handler: Hapi.Lifecycle.Method): Promise<{ order: string[]; status: number; held: number }> {
  const collection = await freshCollection([{ _id: 'd', state: 'archived' }]);
  const order: string[] = [];
  let answered!: () => void;
  const answer = new Promise<void>((resolve) => (answered = resolve));
  const gate = Promise.race([answer, sleep(1_000)]);
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
      options: { plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }), mode: 'checkout', document: true } }, handler },
    }),
  );
  const response = await server.inject({ method: 'POST', url: '/drafts/d/checkout' });
  order.push('the client had the answer');
  answered();
  await sleep(300);
  return { order, status: response.statusCode, held: (await heldIds(collection, 'd')).length };
}

describe('hapi: a checkout route that refuses with a plain 4xx response', () => {
  afterEach(stopServers);

  it('releases the lock before the refusal is sent, as for a thrown boom', async () => {
    const outcome = await answerAndRelease((request, h) => (lockOf(request).document?.state === 'archived' ? h.response({ reason: 'archived' }).code(422) : lockOf(request).lock));
    expect(outcome, 'the release landed before the client had the 422 answer').to.deep.equal({
      order: ['the release landed', 'the client had the answer'],
      status: 422,
      held: 0,
    });
  });
});
