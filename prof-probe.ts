import { MongoClient } from 'mongodb';
import { startMongoBackend } from './support/mongo-backend';
import { contenders } from './bench/contenders';
import { hot } from './bench/workloads';
(async () => {
  const b = await startMongoBackend(() => undefined);
  const c = new MongoClient(b.uri, { maxPoolSize: 100 }); await c.connect();
  const db = c.db('prof2'); let n = 0;
  const fresh = async () => db.collection(`c${n++}`);
  const list = await contenders(db);
  for (const name of ['monglock writeLock', 'mongo-locks (coyotte508)', 'monglock writeLock', 'mongo-locks (coyotte508)']) {
    const ct = list.find((x) => x.name === name)!;
    for (const w of [1, 16]) {
      const r = await hot(ct, fresh, w, 2000);
      console.log(name.padEnd(30), w, r.perSecond.toFixed(0), r.fairness.toFixed(2));
    }
  }
  await c.close(); await b.stop();
})();
