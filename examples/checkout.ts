/** Checkout/checkin across HTTP requests (docs/hapi.md: Checkout and checkin). */
import * as Boom from '@hapi/boom';
import Hapi from '@hapi/hapi';
import { MongoClient } from 'mongodb';
import { writeLock, type LockData } from 'monglock';
import { lockOf, lockPayload, monglockPlugin, type LockPayload } from 'monglock/hapi';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string }>('drafts');
  await collection.deleteMany({});
  await collection.insertOne({ _id: 'd-1' });
  const server = Hapi.server({ port: 0 });
  try {
    // #region readme
    const drafts = writeLock({ collection, locktimeout: 60_000, boom: Boom });
    await server.register({ plugin: monglockPlugin });
    const filter = (request: { readonly params: Record<string, unknown> }) => ({ _id: String(request.params.id) });

    server.route({
      method: 'POST',
      path: '/drafts/{id}/checkout', // the lock outlives the request: the client keeps the JSON
      options: { plugins: { monglock: { lock: drafts, filter, mode: 'checkout' } }, handler: (request) => lockOf(request).lock },
    });
    // The client sends the lock back: { lock }. lockPayload answers 400 to a payload without it.
    server.route<{ Payload: LockPayload }>({
      method: 'POST',
      path: '/drafts/{id}/extend',
      options: { validate: { payload: lockPayload(drafts) } },
      handler: (request) => drafts.extend(filter(request), { lock: request.payload.lock }),
    });
    server.route<{ Payload: LockPayload }>({
      method: 'POST',
      path: '/drafts/{id}/checkin',
      options: { validate: { payload: lockPayload(drafts) } },
      handler: async (request) => {
        await drafts.release(filter(request), { lock: request.payload.lock });
        return { checkedIn: true };
      },
    });
    // #endregion
    const lock: LockData = JSON.parse((await server.inject({ method: 'POST', url: '/drafts/d-1/checkout' })).payload);
    const busy = await server.inject({ method: 'POST', url: '/drafts/d-1/checkout' });
    // Without the checkout's JSON, no checkin: no lock, null, or a guessed acquisition time.
    for (const payload of [{}, { lock: null }, { lock: lock.timestamp }]) {
      const forged = await server.inject({ method: 'POST', url: '/drafts/d-1/checkin', payload });
      if (forged.statusCode !== 400) throw new Error(`a checkin with ${JSON.stringify(payload)} answered ${forged.statusCode}`);
    }
    const extended = await server.inject({ method: 'POST', url: '/drafts/d-1/extend', payload: { lock } });
    const back = await server.inject({ method: 'POST', url: '/drafts/d-1/checkin', payload: { lock } });
    console.log(busy.statusCode, extended.statusCode, back.payload);
    if (busy.statusCode !== 409 || extended.statusCode !== 200 || back.statusCode !== 200) throw new Error('unexpected');
  } finally {
    await server.stop();
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
