/**
 * The hapi plugin with `filters` and `commitAll`: as for a one-document route, no update is sent
 * once the response has gone out (a server timeout answered 503: the client may retry, so an
 * update must not be applied behind its back). The check is made right before each write.
 */
import { expect } from 'chai';
import { commitAll, writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, send, stopServers } from '../../support/hapi-server';

describe('hapi `filters` route: commitAll after the response went out', function () {
  this.timeout(30_000);
  afterEach(stopServers);

  it('sends no commit once the 503 of a server timeout is out', async () => {
    const accounts = await freshCollection([{ _id: 1, n: 0 }, { _id: 2, n: 0 }]);
    /** Each updateOne sent: its number, when, and whether it carries the caller's update (a commit) or only releases. */
    const sent: Array<[number, number, 'commit' | 'release']> = [];
    const started = Date.now();
    // The reply of the first commit (an updateOne) comes back slowly: the server timeout answers meanwhile.
    const slow = delayedCollection(accounts, {
      request: (method, n, args) => {
        if (method === 'updateOne') sent.push([n, Date.now() - started, '$inc' in (args[1] as object) ? 'commit' : 'release']);
        return undefined;
      },
      reply: (method, n) => (method === 'updateOne' && n === 1 ? 400 : undefined),
    });
    const lock = writeLock({ collection: slow, locktimeout: 10_000 });
    const server = await makeServer((s) =>
      s.route({
        method: 'GET',
        path: '/pair',
        options: {
          timeout: { server: 150 },
          plugins: { monglock: { lock, filters: () => [{ _id: 1 }, { _id: 2 }] } },
          handler: () => commitAll([{ $inc: { n: 1 } }, { $inc: { n: 1 } }], 'ok'),
        },
      }),
    );
    await server.start();
    const status = await send(server.info.port as number, 'GET', '/pair');
    const answeredAt = Date.now() - started;
    expect(status).to.equal(503);
    await sleep(800);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    const late = sent.filter(([, at, kind]) => at > answeredAt && kind === 'commit');
    const what = `the 503 was received at ${answeredAt} ms; updateOne calls sent at ${JSON.stringify(sent)}; documents hold n = ${JSON.stringify(docs.map((doc) => doc.n))}`;
    expect(late, what).to.deep.equal([]);
    // The first commit was sent before the answer went out and landed; the second never was; both locks are released.
    expect(docs.map((doc) => [doc.n, doc.lock.tags.write.length]), what).to.deep.equal([[1, 0], [0, 0]]);
  });
});
