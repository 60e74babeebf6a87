/**
 * The hapi plugin with `filters` and `commitAll`: as for a one-document route, the answer says
 * what was applied. A commit whose first write went out before hapi's server timeout fired is
 * finished, and the answer waits for it (its value, not a 503 beside a half-applied commit); no
 * write is sent once the answer is out.
 */
import { expect } from 'chai';
import { commitAll, writeLock } from '../../../lib';
import { delayedCollection } from '../../../stress/delayed-collection';
import { freshCollection, sleep } from '../../support/fixture';
import { makeServer, send, stopServers } from '../../support/hapi-server';

describe('hapi `filters` route: commitAll when the server timeout fires during it', function () {
  this.timeout(30_000);
  afterEach(stopServers);

  it('a commitAll whose first write went out is finished and answered (not 503 with half of it applied); nothing is sent after the answer', async () => {
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
    await sleep(300);
    const docs = await accounts.find().sort({ _id: 1 }).toArray();
    const late = sent.filter(([, at]) => at > answeredAt);
    const what = `answered ${status} at ${answeredAt} ms; updateOne calls sent at ${JSON.stringify(sent)}; documents hold n = ${JSON.stringify(docs.map((doc) => doc.n))}`;
    expect(late, what).to.deep.equal([]);
    expect(status, what).to.equal(200);
    // Both commits applied, both locks released with them.
    expect(docs.map((doc) => [doc.n, doc.lock.tags.write.length]), what).to.deep.equal([[1, 0], [1, 0]]);
  });
});
