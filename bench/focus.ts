/** `tsx bench/focus.ts [L]`: a quick look at a few contenders (latency, hot ×16, read-modify-write) at one majority delay. */
import { randomBytes } from 'node:crypto';
import { MongoClient } from 'mongodb';
import { startMongoBackend } from '../support/mongo-backend';
import { contenders } from './contenders';
import { MajorityProxy } from './majority-proxy';
import { hot, latency, readModifyWrite } from './workloads';

async function main(): Promise<void> {
  const delay = Number(process.argv[2] ?? 0);
  const only = (process.argv[3] ?? '').split(',').filter(Boolean);
  const backend = await startMongoBackend(() => undefined);
  const { hostname, port } = new URL(backend.uri.replace(/^mongodb:/, 'http:'));
  const proxy = new MajorityProxy(hostname, Number(port), delay);
  await proxy.start();
  const client = await MongoClient.connect(proxy.uri(), { maxPoolSize: 100 });
  try {
    const db = client.db(`monglock_focus_${randomBytes(3).toString('hex')}`);
    const fresh = async () => db.collection(`c_${randomBytes(5).toString('hex')}`);
    for (const contender of await contenders(db)) {
      if (only.length > 0 && !only.some((name) => contender.name.includes(name))) continue;
      await latency(contender, fresh, 100);
      const l = await latency(contender, fresh, 400);
      const h = contender.kind === 'floor' ? undefined : await hot(contender, fresh, 16, 2_000);
      const r = contender.readModifyWrite && !contender.name.includes('shaped') ? await readModifyWrite(contender, fresh, 100) : undefined;
      console.log(`${contender.name.padEnd(40)} a+r p50 ${l.p50.toFixed(2)} ms; hot×16 ${h ? h.perSecond.toFixed(0) : '–'}/s fairness ${h ? h.fairness.toFixed(2) : '–'} worst ${h ? h.worstWait.toFixed(0) : '–'} ms; rmw p50 ${r ? r.p50.toFixed(2) : '–'} ms`);
    }
    await db.dropDatabase();
  } finally {
    await client.close();
    await proxy.stop();
    await backend.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
