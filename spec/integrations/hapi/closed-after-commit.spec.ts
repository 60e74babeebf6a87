/**
 * An onPostHandler extension that answers `h.close` after the handler returned
 * `commit(update, value)`: hapi skips onPreResponse and ends the response with no body and Node's
 * default 200. The commit is applied with the release before that end goes out (as for a 204),
 * and the status is 500 when it cannot be applied, never a 200 for a commit that was dropped.
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { freshCollection } from '../../support/fixture';
import { debitRoute, heldIds, makeServer, stopServers } from '../../support/hapi-server';

/** Resolves once `signal` aborts, or after `ms`. */
const abortedOrAfter = (signal: AbortSignal, ms: number): Promise<void> =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    signal.addEventListener('abort', () => resolve(), { once: true });
    setTimeout(resolve, ms);
  });

describe("hapi: h.close from an onPostHandler extension after the handler's commit", () => {
  afterEach(stopServers);

  for (const lockTaken of [false, true]) {
    it(lockTaken ? 'the lock was taken meanwhile: a 500 with no body, nothing written' : 'the commit is applied before the close goes out, answered 200 with no body', async function () {
      this.timeout(20_000);
      const accounts = await freshCollection([{ _id: 'a', balance: 100 }]);
      const lock = writeLock({ collection: accounts, locktimeout: 1_000 });
      const close: Hapi.Lifecycle.Method = async (request, h) => {
        if (lockTaken) {
          await writeLock({ collection: accounts }).release({ _id: 'a' }); // v2's forced release, proof-less: another process takes it
          await abortedOrAfter(lockOf(request).signal, 3_000); // the next extension is refused
        }
        return h.close;
      };
      const server = await makeServer((s) => s.route(debitRoute(lock, { ext: { onPostHandler: { method: close } } })));
      await server.start();
      const response = await fetch(`http://127.0.0.1:${server.info.port}/accounts/a/debit`, { method: 'POST' });
      const body = await response.text();
      const heldOnceAnswered = (await heldIds(accounts, 'a')).length;
      const balance = (await accounts.findOne({ _id: 'a' as never }))?.balance as number;
      expect({ status: response.status, body, heldOnceAnswered, balance }, 'the closed answer, the lock entries once the client had it, and the balance').to.deep.equal(
        lockTaken ? { status: 500, body: '', heldOnceAnswered: 0, balance: 100 } : { status: 200, body: '', heldOnceAnswered: 0, balance: 70 },
      );
    });
  }
});
