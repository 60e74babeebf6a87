/**
 * A HEAD request to a GET checkout route: hapi runs the handler and answers 200 without a body, so
 * the lock's JSON never reaches the client. docs/hapi.md: checkout keeps the lock after the
 * response only when the answer went out with it; when the JSON never reaches the client, the
 * plugin releases the lock (nobody else can).
 */
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { lockOf } from '../../../lib/hapi';
import { freshCollection } from '../../support/fixture';
import { makeServer, released, stopServers } from '../../support/hapi-server';

describe('hapi: a HEAD request to a GET checkout route', () => {
  afterEach(stopServers);

  it('the client gets no lock JSON, so the lock is released', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'h' }]);
    const lock = writeLock({ collection, locktimeout: 60_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/drafts/{id}/checkout',
        options: { plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }), mode: 'checkout' } }, handler: (request) => lockOf(request).lock },
      }),
    );
    await server.start();
    const head = await fetch(`http://127.0.0.1:${server.info.port}/drafts/h/checkout`, { method: 'HEAD' });
    expect({ status: head.status, body: await head.text() }, 'HEAD answered without the lock JSON').to.deep.equal({ status: 200, body: '' });
    const outcome = await released(collection, 'h', 2_000).then(
      () => 'released',
      (error: Error) => error.message,
    );
    expect(outcome, 'the lock nobody received').to.equal('released');
    const next = await fetch(`http://127.0.0.1:${server.info.port}/drafts/h/checkout`);
    expect(next.status, 'a GET checkout after the HEAD').to.equal(200);
  });
});
