/**
 * A range request (`Range: bytes=…`) on a locked route whose stream body has a content-length:
 * hapi answers 206 with only the asked bytes, and the client has that whole answer while the
 * stream is still being read. docs/hapi.md: "A client therefore never has the whole body before
 * the lock is free"; a client that waits for each answer is never refused by its previous one.
 */
import { request as httpRequest } from 'node:http';
import { Readable } from 'node:stream';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { heldIds, makeServer, released, stopServers } from '../../support/hapi-server';

/** The status of a GET on its own connection (the client's first one still waits for the server to end the 206). */
function onNewConnection(port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, agent: false, headers: { connection: 'close', range: 'bytes=0-0' } }, (res) => {
      res.destroy(); // the status is all it needs
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('hapi: a range request on a stream body with a content-length', () => {
  afterEach(stopServers);

  it('the lock is free once the client has the whole 206 answer, and its next request is not refused', async function () {
    this.timeout(20_000);
    const collection = await freshCollection([{ _id: 'f' }]);
    const lock = writeLock({ collection, locktimeout: 10_000 });
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/files/{id}',
        options: {
          plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
          handler: (_request, h) => {
            const body = Readable.from(
              (async function* () {
                yield Buffer.from('abc');
                await gate; // the rest of the file comes later (a slow disk, GridFS)
                yield Buffer.from('def');
              })(),
              { objectMode: false },
            );
            return h.response(body).type('application/octet-stream').header('content-length', '6');
          },
        },
      }),
    );
    await server.start();
    const url = `http://127.0.0.1:${server.info.port}/files/f`;
    try {
      const first = await fetch(url, { headers: { range: 'bytes=0-1', 'accept-encoding': 'identity' } });
      const body = await first.text();
      expect({ status: first.status, body }, 'the range answered').to.deep.equal({ status: 206, body: 'ab' });
      const heldOnceAnswered = (await heldIds(collection, 'f')).length;
      const next = await onNewConnection(server.info.port as number, '/files/f');
      expect({ heldOnceAnswered, next }, 'lock entries once the client had its whole 206 answer, and the status of its next request').to.deep.equal({ heldOnceAnswered: 0, next: 206 });
    } finally {
      openGate();
      await released(collection, 'f', 5_000).catch(() => undefined);
    }
  });
});
