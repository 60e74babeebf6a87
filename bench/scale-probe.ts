/**
 * What `bench:scale` counts in a measured process: every command its client sends, by name (driver
 * command monitoring), the documents its writes changed, the change-stream documents it received,
 * the longest pause between two `getMore`s of its stream, and the process's CPU time and memory.
 * A {@link Snapshot} is taken at each edge of a window; {@link windowOf} turns two into figures.
 */
import type { MongoClient } from 'mongodb';
import { isChangeStreamCommand } from '../support/command-kinds';

/** The driver's own commands (handshakes, heartbeats, session ends): never a lock's. */
const DRIVER_COMMANDS = new Set(['hello', 'isMaster', 'ismaster', 'endSessions', 'ping', 'buildInfo']);

/** The counters of one process at one moment. */
export interface Snapshot {
  /** Absolute ms (`performance.timeOrigin + performance.now()`: one clock for every process of the machine). */
  readonly at: number;
  /** commandStarted by label: the command's name, `changeStream` for a stream's opening `aggregate`. */
  readonly commands: Record<string, number>;
  /** Documents written: `nModified` of `update` replies, `lastErrorObject.n` of `findAndModify` replies that wrote. */
  readonly written: number;
  /** Write statements sent: one per `findAndModify`, one per element of an `update`'s `updates`. */
  readonly statements: number;
  /** Change-stream documents received (`firstBatch`/`nextBatch` lengths of the stream's replies). */
  readonly events: number;
  /** CPU time of the process (user + system), µs. */
  readonly cpuMicros: number;
  readonly rssBytes: number;
  /** The largest resident set so far, kB. */
  readonly maxRssKb: number;
}

/** Absolute ms, comparable between the processes of one machine. */
export const now = (): number => performance.timeOrigin + performance.now();

/** Counts one client's commands from the moment it is made; `snapshot()` reads the counters. */
export class CommandProbe {
  private readonly commands: Record<string, number> = {};
  private written = 0;
  private statements = 0;
  private events = 0;
  /** When each `getMore` was sent (absolute ms). */
  private readonly getMoreTimes: number[] = [];
  /** When the first change stream was opened (absolute ms). */
  private streamOpenedAt: number | undefined;
  private readonly streamCursors = new Set<string>();

  constructor(client: MongoClient) {
    client.on('commandStarted', (event) => {
      const label = labelOf(event);
      this.commands[label] = (this.commands[label] ?? 0) + 1;
      if (event.commandName === 'findAndModify') this.statements++;
      if (event.commandName === 'update') this.statements += (event.command.updates as unknown[] | undefined)?.length ?? 0;
      if (event.commandName === 'getMore') this.getMoreTimes.push(now());
    });
    client.on('commandSucceeded', (event) => {
      const reply = event.reply as { nModified?: number; lastErrorObject?: { n?: number; updatedExisting?: boolean; upserted?: unknown }; cursor?: { id?: unknown; firstBatch?: unknown[]; nextBatch?: unknown[] } };
      if (event.commandName === 'update') this.written += reply.nModified ?? 0;
      if (event.commandName === 'findAndModify' && (reply.lastErrorObject?.updatedExisting || reply.lastErrorObject?.upserted !== undefined)) this.written += reply.lastErrorObject.n ?? 1;
      if (event.commandName === 'getMore') this.events += reply.cursor?.nextBatch?.length ?? 0;
      else if (event.commandName === 'aggregate' && this.streamCursors.has(String(event.requestId))) this.events += reply.cursor?.firstBatch?.length ?? 0;
      this.streamCursors.delete(String(event.requestId));
    });
    client.on('commandStarted', (event) => {
      if (event.commandName !== 'aggregate' || !isChangeStreamCommand(event)) return;
      this.streamCursors.add(String(event.requestId));
      this.streamOpenedAt ??= now();
    });
  }

  /** The counters now. */
  snapshot(): Snapshot {
    const at = now();
    const cpu = process.cpuUsage();
    return {
      at,
      commands: { ...this.commands },
      written: this.written,
      statements: this.statements,
      events: this.events,
      cpuMicros: cpu.user + cpu.system,
      rssBytes: process.memoryUsage().rss,
      maxRssKb: process.resourceUsage().maxRSS,
    };
  }

  /**
   * The longest pause (ms) between two `getMore`s sent between `from` and `to` (absolute ms), the
   * edges included (from `from`, or from the stream's opening if later, to the first; from the
   * last to `to`); null when no change stream was opened before `to`.
   */
  longestGetMoreGap(from: number, to: number): number | null {
    if (this.streamOpenedAt === undefined || this.streamOpenedAt > to) return null;
    let previous = Math.max(from, this.streamOpenedAt);
    let longest = 0;
    for (const at of this.getMoreTimes) {
      if (at <= previous || at > to) continue;
      longest = Math.max(longest, at - previous);
      previous = at;
    }
    return Math.max(longest, to - previous);
  }
}

function labelOf(event: { readonly commandName: string; readonly command?: { readonly pipeline?: unknown } }): string {
  if (DRIVER_COMMANDS.has(event.commandName)) return `driver:${event.commandName}`;
  return event.commandName === 'aggregate' && isChangeStreamCommand(event) ? 'changeStream' : event.commandName;
}

/** True for a label a lock call sent: not the driver's own, nor a change stream's (`changeStream`, `getMore`, `killCursors`). */
export function isLockCommand(label: string): boolean {
  return !label.startsWith('driver:') && label !== 'changeStream' && label !== 'getMore' && label !== 'killCursors';
}

/** The figures of one process over one window. */
export interface Window {
  readonly seconds: number;
  /** Commands sent in the window, by label. */
  readonly commands: Record<string, number>;
  /** Of those, the lock calls' (see {@link isLockCommand}). */
  readonly lockCommands: number;
  readonly getMores: number;
  readonly written: number;
  readonly statements: number;
  readonly events: number;
  /** CPU of the process, % of one core. */
  readonly cpuPercent: number;
  readonly rssMb: number;
  readonly maxRssMb: number;
}

/** The figures between two snapshots of one process. */
export function windowOf(from: Snapshot, to: Snapshot): Window {
  const seconds = (to.at - from.at) / 1000;
  const commands: Record<string, number> = {};
  for (const [label, count] of Object.entries(to.commands)) {
    const sent = count - (from.commands[label] ?? 0);
    if (sent > 0) commands[label] = sent;
  }
  const getMores = commands.getMore ?? 0;
  return {
    seconds,
    commands,
    lockCommands: Object.entries(commands).reduce((sum, [label, count]) => sum + (isLockCommand(label) ? count : 0), 0),
    getMores,
    written: to.written - from.written,
    statements: to.statements - from.statements,
    events: to.events - from.events,
    cpuPercent: (to.cpuMicros - from.cpuMicros) / 1e4 / seconds,
    rssMb: to.rssBytes / 2 ** 20,
    maxRssMb: to.maxRssKb / 1024,
  };
}
