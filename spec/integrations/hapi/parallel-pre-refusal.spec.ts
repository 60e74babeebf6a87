/**
 * A refusal by one pre method of a parallel set (`pre: [[slow, check]]`, `check` throws while
 * `slow` still runs under the lock): hapi settles on the refusal at once, and the plugin holds
 * it back until the route's code has ended and the lock is released (or `maxHold` released it),
 * so the client's next request is not refused by its own previous one.
 */
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import type { Document } from 'mongodb';
import { writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, stopServers } from '../../support/hapi-server';

const byId = (request: Hapi.Request): Document => ({ _id: request.params.id });
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('hapi: a refusal by a pre method while another of its parallel set runs', () => {
  afterEach(stopServers);

  for (const [name, slowMs, maxHold] of [
    ['goes out once the other pre method has ended and the lock is released', 2_000, undefined],
    ['goes out once maxHold released the lock, when the other pre method runs on', 5_000, 300],
  ] as const) {
    it(name, async function () {
      this.timeout(20_000);
      const collection = await freshCollection([{ _id: 'p' }]);
      const order: string[] = [];
      let answered!: () => void;
      const clientHasAnswer = new Promise<void>((resolve) => (answered = resolve));
      const slow = async (): Promise<string> => {
        await Promise.race([clientHasAnswer, sleep(slowMs)]); // ends at once once the client has its answer (a slow pre method, which ignores its signal)
        order.push('the slow pre method ended');
        return 'slow';
      };
      const check = (): never => {
        throw Boom.forbidden('not yours');
      };
      const server = await makeServer((s) =>
        s.route({
          method: 'POST',
          path: '/docs/{id}',
          options: { pre: [[{ method: slow }, { method: check }]], plugins: { monglock: { lock: writeLock({ collection, locktimeout: 10_000 }), filter: byId, ...(maxHold && { maxHold }) } }, handler: () => 'never' },
        }),
      );
      await server.start();
      const url = `http://127.0.0.1:${server.info.port}/docs/p`;
      const response = await fetch(url, { method: 'POST' });
      await response.arrayBuffer();
      order.push('the client had the answer');
      const heldOnceAnswered = (await heldIds(collection, 'p')).length;
      answered();
      const expectedOrder = maxHold ? ['the client had the answer', 'the slow pre method ended'] : ['the slow pre method ended', 'the client had the answer'];
      await sleep(100);
      expect({ status: response.status, heldOnceAnswered, order }, 'the refusal, the lock entries once the client had it, and the order').to.deep.equal({ status: 403, heldOnceAnswered: 0, order: expectedOrder });
    });
  }
});
