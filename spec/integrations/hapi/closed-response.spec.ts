/**
 * `h.close`: hapi skips onPreResponse and ends the response at once. The plugin releases the
 * route's lock before that end goes out, so the client's next request is not refused by the lock
 * of its previous one.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, releaseAfterAnswer, stopServers } from '../../support/hapi-server';

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });

describe('hapi: h.close', () => {
  afterEach(stopServers);

  for (const where of ['handler', 'pre method', 'onPostHandler extension'] as const) {
    it(`${where === 'onPostHandler extension' ? 'an' : 'a'} ${where} that returns h.close: the lock is released before the closed response reaches the client`, async function () {
      this.timeout(20_000);
      const seeded = await freshCollection([{ _id: 'c' }]);
      const { collection, order, answered } = releaseAfterAnswer(seeded);
      const close: Hapi.Lifecycle.Method = (_request, h) => h.close;
      const server = await makeServer((s) =>
        s.route({
          method: 'POST',
          path: '/docs/{id}',
          options: {
            plugins: { monglock: { lock: writeLock({ collection, locktimeout: 10_000 }), filter: byId } },
            ...(where === 'handler' && { handler: close }),
            ...(where === 'pre method' && { pre: [{ method: close }], handler: () => 'never' }),
            ...(where === 'onPostHandler extension' && { ext: { onPostHandler: { method: close } }, handler: () => 'answered by the extension' }),
          },
        }),
      );
      await server.start();
      const response = await fetch(`http://127.0.0.1:${server.info.port}/docs/c`, { method: 'POST' });
      await response.arrayBuffer();
      answered();
      const heldOnceAnswered = (await heldIds(seeded, 'c')).length;
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect({ status: response.status, order, heldOnceAnswered }, 'the release landed before the client had the closed response').to.deep.equal({
        status: 200,
        order: ['the release landed', 'the client had the answer'],
        heldOnceAnswered: 0,
      });
      const next = await fetch(`http://127.0.0.1:${server.info.port}/docs/c`, { method: 'POST' });
      expect(next.status, "the client's next request is not refused by its previous one").to.equal(200);
    });
  }
});
