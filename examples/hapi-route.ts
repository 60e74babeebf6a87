/** A hapi route that locks the order it pays for (README: In a hapi route; docs/hapi.md). */
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';
import { lockOf, monglockPlugin } from 'monglock/hapi';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const db = client.db('monglock_examples');
  await db.collection('orders').deleteMany({});
  await db.collection<{ _id: string; status: string }>('orders').insertOne({ _id: 'o-1', status: 'open' });
  const server = Hapi.server({ port: 0 });
  try {
    // #region readme
    const orders = writeLock({ collection: db.collection('orders'), locktimeout: 5000, boom: Boom });
    await server.register({ plugin: monglockPlugin });

    server.route({
      method: 'POST',
      path: '/orders/{id}/pay',
      options: {
        plugins: { monglock: { lock: orders, filter: (request: Hapi.Request) => ({ _id: request.params.id }), wait: 2000 } },
        handler: async (request) => {
          const { lock, guard } = lockOf(request); // held until the answer is settled, released before it goes out
          const paid = await db.collection('orders').updateOne(guard({ status: 'open' }), { $set: { status: 'paid', fence: lock.fence } });
          return { paid: paid.modifiedCount === 1, fence: lock.fence };
        },
      },
    });
    // #endregion
    const first = await server.inject({ method: 'POST', url: '/orders/o-1/pay' });
    const again = await server.inject({ method: 'POST', url: '/orders/o-1/pay' });
    const missing = await server.inject({ method: 'POST', url: '/orders/nope/pay' });
    console.log(first.statusCode, first.payload, again.payload, missing.statusCode, missing.payload);
    if (first.statusCode !== 200 || JSON.parse(first.payload).paid !== true || JSON.parse(again.payload).paid !== false) throw new Error('unexpected');
    if (missing.statusCode !== 404 || JSON.parse(missing.payload).message !== 'RessourceNotFound') throw new Error('unexpected 404');
  } finally {
    await server.stop();
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
