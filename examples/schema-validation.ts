/** A `$jsonSchema` validator that constrains the lock field and lets monglock write it (docs/api.md: Schema validation). */
import { MongoClient } from 'mongodb';
import { commit, writeLock } from 'monglock';

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const db = client.db('monglock_examples');
  await db.collection('validated').drop().catch(() => undefined);
  try {
    // #region readme
    const collection = await db.createCollection<{ _id: string; balance: number }>('validated', {
      validator: {
        $jsonSchema: {
          bsonType: 'object',
          properties: {
            balance: { bsonType: ['int', 'long', 'double'] },
            lock: {
              bsonType: 'object',
              additionalProperties: false,
              properties: {
                fence: { bsonType: ['int', 'long', 'double'] },
                now: { bsonType: 'date' },
                until: { bsonType: 'date' },
                judged: { bsonType: 'date' },
                born: { bsonType: 'date' },
                tags: { bsonType: 'object' },
                recent: { bsonType: 'object' },
                limits: { bsonType: 'object' },
                queue: { bsonType: 'array' },
                committed: { bsonType: 'array' },
                upgrade: { bsonType: 'array' },
                quarantine: { bsonType: 'object', required: ['reason', 'since', 'by'], properties: { reason: { bsonType: 'string' }, since: { bsonType: 'date' }, until: { bsonType: 'date' }, by: { bsonType: 'string' } } },
              },
            },
          },
        },
      },
    });
    // #endregion
    await collection.insertOne({ _id: 'acc-1', balance: 100 });
    const accounts = writeLock({ collection, locktimeout: 5000, fair: true });
    const balance = await accounts.using({ _id: 'acc-1' }, { wait: 2000, document: { balance: 1 } }, (held) => commit({ $inc: { balance: -30 } }, held.document.balance - 30));
    console.log('balance', balance);
    if (balance !== 70) throw new Error('unexpected');
  } finally {
    await db.collection('validated').drop().catch(() => undefined);
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
