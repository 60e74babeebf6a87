/**
 * docs/hapi.md: "A stream body (a handler that returns a `Readable`, or `h.response(stream)`) is
 * read under the lock ... the lock is released before the last byte the client gets goes out",
 * and a handler's `commit(update, value)` answers `value` "once the update and the release are
 * applied together". A commit whose value is a stream would be read after the commit's release
 * (hapi reads a body after onPreResponse), so it is refused: a 500, nothing written, and nobody
 * reads route data without the lock.
 */
import { Readable } from 'node:stream';
import Hapi from '@hapi/hapi';
import { expect } from 'chai';
import { commit, writeLock } from '../../../lib';
import { freshCollection } from '../../support/fixture';
import { makeServer, stopServers } from '../../support/hapi-server';

describe('hapi: a stream body, and a commit whose value is a stream', () => {
  afterEach(stopServers);

  for (const returns of ['stream', 'commit(update, stream)'] as const) {
    it(`no stream body is read without the route's lock (handler returns ${returns}): a stream is read under it, a commit with a stream value refused`, async function () {
      this.timeout(10_000);
      const reports = await freshCollection([{ _id: 'r', status: 'open' }]);
      const lock = writeLock({ collection: reports, locktimeout: 5_000 });
      const other = writeLock({ collection: reports, locktimeout: 5_000 }); // another client
      let takenMeanwhile: string | undefined;
      const body = (): Readable => {
        let step = 0;
        return new Readable({
          read() {
            step++;
            if (step === 1) return void this.push('part one,');
            if (step > 2) return void this.push(null);
            // While hapi reads the body: another caller tries the lock.
            void other.acquire({ _id: 'r' }).then(
              async (taken) => {
                takenMeanwhile = taken.id;
                await taken.release();
                this.push('part two');
              },
              () => this.push('part two'),
            );
          },
        });
      };
      const server = await makeServer((s) =>
        s.route({
          method: 'GET',
          path: '/reports/{id}',
          options: {
            plugins: { monglock: { lock, filter: (request: Hapi.Request) => ({ _id: request.params.id }) } },
            handler: () => (returns === 'stream' ? body() : commit({ $set: { status: 'sent' } }, body())),
          },
        }),
      );
      const response = await server.inject({ method: 'GET', url: '/reports/r' });
      expect(takenMeanwhile, `another caller took the route's lock (${String(takenMeanwhile)}) while hapi read its stream body`).to.equal(undefined);
      if (returns === 'stream') {
        expect(response.statusCode, `the route answered (${response.payload})`).to.equal(200);
        expect(response.payload, 'the whole body went out').to.equal('part one,part two');
        return;
      }
      expect(response.statusCode, `a commit with a stream value is refused (${response.payload})`).to.equal(500);
      expect((await reports.findOne({ _id: 'r' as never }))?.status, 'nothing written').to.equal('open');
    });
  }
});
