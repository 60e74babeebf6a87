/**
 * A checkout's lock is the client's once the client has the lock's whole JSON. A request with a
 * `Range` header that hapi does not honour (a POST, several ranges, an `If-Range` that does not
 * match) is answered 200 with the whole JSON, and one whose range covers the whole body is
 * answered 206 with all of it: in each case the client holds a checkout, so the lock must stay
 * held (else the next checkout gets it too, and two clients each hold "their" checkout).
 */
import type Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, stopServers } from '../../support/hapi-server';

const byId = (request: Hapi.Request): { _id: string } => ({ _id: String(request.params.id) });

describe('hapi checkout answered with the whole lock JSON to a request with a Range header', function () {
  this.timeout(20_000);
  afterEach(stopServers);

  const cases: Array<{ what: string; method: 'GET' | 'POST'; headers: Record<string, string> }> = [
    { what: 'a POST checkout (hapi cuts no range from a POST)', method: 'POST', headers: { range: 'bytes=0-9' } },
    { what: 'a GET with two ranges (hapi ignores multiple ranges)', method: 'GET', headers: { range: 'bytes=0-1,3-4' } },
    { what: 'a GET whose If-Range does not match (hapi sends the whole body)', method: 'GET', headers: { range: 'bytes=0-9', 'if-range': '"other"' } },
    { what: 'a GET whose range is the whole body (206 with all of it)', method: 'GET', headers: { range: 'bytes=0-' } },
  ];
  for (const { what, method, headers } of cases) {
    it(`${what}: the lock the client got stays held, and the next checkout is refused`, async () => {
      const collection = await freshCollection([{ _id: 'd' }]);
      const lock = writeLock({ collection, locktimeout: 60_000 });
      const server = await makeServer((s) => {
        for (const m of ['GET', 'POST'] as const) {
          s.route({ method: m, path: '/drafts/{id}/checkout', options: { plugins: { monglock: { lock, filter: byId, mode: 'checkout' } }, handler: (request) => lockOf(request).lock } });
        }
      });
      await server.start();
      const url = `http://127.0.0.1:${server.info.port}/drafts/d/checkout`;
      const first = await fetch(url, { method, headers });
      const body = await first.text();
      const got = JSON.parse(body) as { id: string };
      expect({ status: first.status, id: typeof got.id }, `the client got the whole lock JSON (${first.status} ${body})`).to.deep.include({ id: 'string' });
      expect([200, 206], 'a successful checkout answer').to.include(first.status);
      const second = await fetch(url, { method: 'POST' });
      const secondBody = await second.text();
      expect(second.status, `a second checkout while the first client holds its lock ${got.id} (got ${secondBody}): two clients each hold a checkout`).to.equal(409);
      expect(await heldIds(collection, 'd'), `the checkout the client holds (${got.id}) is held`).to.deep.equal([got.id]);
    });
  }
});
