/**
 * One OS process of the mutual-exclusion stress: its own driver client, several workers, each
 * repeatedly locking a random target (a writeLock document, a cooperative multiLock tag, a
 * resource lock, a fair writeLock document, a folded writeLock section, or 1–2 permits of a
 * semaphore of limit 3, whose holders overlap and only log their permits, a reentrant writeLock
 * hold with a nested hold inside, a multiLock read lock upgraded to write and back, or a term of an
 * election) and doing a
 * read-modify-write of that target's counter inside the critical section, guarded by the fencing
 * token (the folded kind keeps its counter in the locked document, read by the acquisition and
 * written by the release itself). Every entry and exit goes to an append-only log
 * (one JSON line per critical section) that the parent checks independently.
 * Usage: worker.ts <json settings>
 */
import { appendFileSync } from 'node:fs';
import { MongoClient } from 'mongodb';
import { commit, election, isLockError, multiLock, resourceLocks, semaphore, writeLock, type LockHandle } from 'monglock';

export interface WorkerSettings {
  readonly uri: string;
  readonly db: string;
  readonly workers: number;
  readonly durationMs: number;
  readonly targets: number;
  /** The limit of the semaphore documents (`s0`, `s1`, …). */
  readonly semaphoreLimit: number;
  readonly log: string;
  /** Its waiters are woken by a change stream as well (half the processes), or only poll. */
  readonly changeStreams: boolean;
}

/** One critical section, as logged. */
export interface SectionRecord {
  readonly target: string;
  readonly fence: number;
  readonly enter: number;
  readonly exit: number;
  /** The guarded read-modify-write of the counter was applied. */
  readonly written: boolean;
  readonly pid: number;
  /** Semaphore sections: the permits held (holders overlap; their sum may never exceed the limit). */
  readonly permits?: number;
  /** Run-once sections (taken with minHold): the acquisition stamp (server ms) and the minimum hold. */
  readonly stamp?: number;
  readonly minHold?: number;
  /** A section that ended by quarantining its target: when the mark had landed (local ms) and its `until` (server ms). */
  readonly quarantined?: { readonly landedBy: number; readonly until: number };
}

/** A run-once section's minimum hold, ms: the next run on its target is stamped at least this much later. */
export const STRESS_MIN_HOLD = 40;
/** How long a stress quarantine lasts, ms. */
export const STRESS_QUARANTINE = 60;

const now = (): number => performance.timeOrigin + performance.now();

async function main(): Promise<void> {
  const settings = JSON.parse(process.argv[2]!) as WorkerSettings;
  // A pool of at least 8: a change stream takes one of its connections (below 4 the feed polls instead).
  const client = await MongoClient.connect(settings.uri, { maxPoolSize: Math.max(8, settings.workers * 2), monitorCommands: true });
  // Hand-overs (a release giving the lock to a waiter here in one write): counted for the report.
  let handOvers = 0;
  client.on('commandStarted', (event) => {
    const conditions = event.commandName === 'findAndModify' ? ((event.command.query as { $and?: Array<Record<string, { $elemMatch?: { id?: unknown } }>> }).$and ?? []) : [];
    if (conditions.some((condition) => typeof condition['lock.tags.write']?.$elemMatch?.id === 'string')) handOvers++;
  });
  const db = client.db(settings.db);
  const { changeStreams } = settings;
  const documents = db.collection('documents');
  const counters = db.collection('counters');
  const exclusive = writeLock({ collection: documents, locktimeout: 10_000, changeStreams });
  const tagged = multiLock({ collection: documents, locktimeouts: { edit: 10_000 }, lockRelationships: { edit: { cooperative: ['edit'] } }, changeStreams });
  const resources = resourceLocks({ collection: db.collection('locks') });
  const fair = writeLock({ collection: documents, locktimeout: 10_000, fair: true, changeStreams });
  const hot = writeLock({ collection: documents, locktimeout: 10_000, changeStreams });
  const permits = semaphore({ collection: documents, limit: settings.semaphoreLimit, locktimeout: 10_000, changeStreams });
  const readWrite = multiLock({
    collection: documents,
    locktimeouts: { read: 10_000, write: 10_000 },
    lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write'], assertive: ['read'] } },
    changeStreams,
  });
  const leaders = election({ collection: documents, lease: 10_000, changeStreams });
  const deadline = now() + settings.durationMs;
  let buffered: string[] = [];
  const flush = (): void => {
    if (buffered.length) appendFileSync(settings.log, buffered.join(''));
    buffered = [];
  };

  const section = async (target: string, acquire: () => Promise<LockHandle>, guarded: (handle: LockHandle, value: number) => Promise<boolean>): Promise<void> => {
    const handle = await acquire();
    const enter = now();
    const counter = await counters.findOne({ _id: target as never });
    const written = await guarded(handle, (counter?.value as number) + 1);
    const exit = now();
    await handle.release();
    buffered.push(`${JSON.stringify({ target, fence: handle.fence, enter, exit, written, pid: process.pid } satisfies SectionRecord)}\n`);
    if (buffered.length >= 200) flush();
  };

  // The counter lives in its own document; the write is guarded by the fencing token (it must
  // exceed the last one written), which is what a store protected by fencing does.
  const fenced = (target: string) => async (handle: LockHandle, value: number) =>
    (await counters.updateOne({ _id: target as never, lastFence: { $lt: handle.fence } }, { $set: { value, lastFence: handle.fence } })).modifiedCount === 1;

  // Folded: the counter is in the locked document; the acquisition reads it, the release writes it.
  const folded = async (target: string): Promise<void> => {
    let enter = 0;
    let exit = 0;
    let fence = 0;
    const written = await exclusive
      .using({ _id: target }, { wait: 30_000, document: { value: 1 } }, (handle) => {
        enter = now();
        fence = handle.fence;
        // The section ends when its commit is sent: the commit and the release are one atomic write.
        exit = now();
        return commit({ $set: { value: ((handle.document?.value as number | undefined) ?? 0) + 1 } }, true);
      })
      .catch(() => false);
    buffered.push(`${JSON.stringify({ target, fence, enter, exit, written, pid: process.pid } satisfies SectionRecord)}\n`);
    if (buffered.length >= 200) flush();
  };

  await Promise.all(
    Array.from({ length: settings.workers }, async (_, worker) => {
      for (let round = 0; now() < deadline; round++) {
        const n = Math.floor(Math.random() * settings.targets);
        switch ((worker + round) % 12) {
          case 10: {
            // A run-once job: released at once, its entry kept until its minimum hold ends.
            const job = await exclusive.acquire({ _id: `j${n}` }, { wait: 30_000, minHold: STRESS_MIN_HOLD });
            const enter = now();
            const counter = await counters.findOne({ _id: `j${n}` as never });
            const written = await fenced(`j${n}`)(job, (counter?.value as number) + 1);
            const exit = now();
            await job.release();
            buffered.push(`${JSON.stringify({ target: `j${n}`, fence: job.fence, enter, exit, written, pid: process.pid, stamp: job.timestamp, minHold: STRESS_MIN_HOLD } satisfies SectionRecord)}\n`);
            break;
          }
          case 11: {
            // A section that may end by quarantining its document for a while: every acquisition meanwhile is refused (Quarantined).
            const held = await exclusive.acquire({ _id: `x${n}` }, { wait: 30_000 }).catch((error: unknown) => {
              if (isLockError(error, 'Quarantined')) return undefined;
              throw error;
            });
            if (!held) break;
            const enter = now();
            const counter = await counters.findOne({ _id: `x${n}` as never });
            const written = await fenced(`x${n}`)(held, (counter?.value as number) + 1);
            const exit = now();
            let quarantined: SectionRecord['quarantined'];
            if (round % 4 === 0) {
              const until = Date.now() + STRESS_QUARANTINE;
              await held.quarantine({ reason: 'stress', until: new Date(until) });
              quarantined = { landedBy: now(), until };
            } else await held.release();
            buffered.push(`${JSON.stringify({ target: `x${n}`, fence: held.fence, enter, exit, written, pid: process.pid, ...(quarantined && { quarantined }) } satisfies SectionRecord)}\n`);
            break;
          }
          case 9: {
            // An election: the section is a term (its document created by the first campaign); the write is fenced by the term's token.
            const term = await leaders.campaign({ _id: `e${n}` }, { wait: 30_000 });
            const enter = now();
            const counter = await counters.findOne({ _id: `e${n}` as never });
            const written = (await counters.updateOne({ _id: `e${n}` as never, lastFence: { $lt: term.fence } }, { $set: { value: (counter?.value as number) + 1, lastFence: term.fence } })).modifiedCount === 1;
            const exit = now();
            await term.resign();
            buffered.push(`${JSON.stringify({ target: `e${n}`, fence: term.fence, enter, exit, written, pid: process.pid } satisfies SectionRecord)}\n`);
            break;
          }
          case 8:
            // One hot document for every worker of every process: hand-overs here, cohorts between processes.
            await section('h0', () => hot.acquire({ _id: 'h0' }, { wait: 30_000 }), fenced('h0'));
            break;
          case 6: {
            // Reentrant: the section runs under a nested hold of the owner's lock (same token).
            const owner = `${process.pid}-${worker}`;
            const outer = await exclusive.acquire({ _id: `o${n}` }, { owner, wait: 30_000 });
            await section(`o${n}`, () => exclusive.acquire({ _id: `o${n}` }, { owner, wait: 30_000 }), async (inner, value) => inner.fence === outer.fence && (await fenced(`o${n}`)(inner, value)));
            await outer.release();
            break;
          }
          case 7: {
            // Converting: a reader upgrades to write for the section, then downgrades; a second upgrader gives up its read lock.
            const reader = await readWrite.acquire({ _id: `c${n}` }, { tag: 'read', wait: 30_000 });
            const upgraded = await reader.convert('write', { wait: 30_000 }).then(
              () => true,
              (error: unknown) => {
                if (!isLockError(error, 'UpgradeConflict')) throw error;
                return false;
              },
            );
            if (upgraded) {
              const enter = now();
              const counter = await counters.findOne({ _id: `c${n}` as never });
              const written = await fenced(`c${n}`)(reader, (counter?.value as number) + 1);
              const exit = now();
              buffered.push(`${JSON.stringify({ target: `c${n}`, fence: reader.fence, enter, exit, written, pid: process.pid } satisfies SectionRecord)}\n`);
              await reader.convert('read');
            }
            await reader.release();
            break;
          }
          case 5: {
            const taken = 1 + (round % 2);
            const handle = await permits.acquire({ _id: `s${n}` }, { wait: 30_000, permits: taken });
            const enter = now();
            await new Promise((done) => setTimeout(done, 2));
            const exit = now();
            await handle.release();
            buffered.push(`${JSON.stringify({ target: `s${n}`, fence: handle.fence, enter, exit, written: true, pid: process.pid, permits: taken } satisfies SectionRecord)}\n`);
            break;
          }
          case 3:
            await section(`q${n}`, () => fair.acquire({ _id: `q${n}` }, { wait: 30_000 }), fenced(`q${n}`));
            break;
          case 4:
            await folded(`f${n}`);
            break;
          case 0:
            await section(`w${n}`, () => exclusive.acquire({ _id: `w${n}` }, { wait: 30_000 }), fenced(`w${n}`));
            break;
          case 1:
            await section(`m${n}`, () => tagged.acquire({ _id: `m${n}` }, { tag: 'edit', wait: 30_000 }), fenced(`m${n}`));
            break;
          default:
            await section(`r${n}`, () => resources.xlock(`r${n}`, `${process.pid}-${worker}-${round}`, { ttl: 10_000, wait: 30_000 }), fenced(`r${n}`));
        }
      }
    }),
  );
  buffered.push(`${JSON.stringify({ handOvers })}\n`);
  flush();
  await client.close();
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
