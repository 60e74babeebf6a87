/**
 * The backend's process as `bench:scale` sees it from outside (Linux `/proc`): which process
 * listens on the server's port, and its CPU time and resident memory.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/** Clock ticks per second of `/proc/<pid>/stat`'s times. */
const TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/**
 * The pid of the process listening on 127.0.0.1 or any address at the port of `uri` (found from
 * `/proc/net/tcp*` and the processes' open sockets), or undefined (not Linux, another machine, not ours).
 */
export function listenerPid(uri: string): number | undefined {
  const port = Number(/:(\d+)(\/|$|\?)/.exec(uri.replace(/^mongodb:\/\//, ''))?.[1]);
  if (!Number.isInteger(port)) return undefined;
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      const local = fields[1];
      if (local === undefined || fields[3] !== '0A') continue; // 0A: listening
      if (parseInt(local.split(':')[1] ?? '', 16) === port) inodes.add(fields[9]!);
    }
  }
  if (inodes.size === 0) return undefined;
  for (const entry of safeList('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    for (const fd of safeList(`/proc/${entry}/fd`)) {
      let target = '';
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      const inode = /^socket:\[(\d+)\]$/.exec(target)?.[1];
      if (inode !== undefined && inodes.has(inode)) return Number(entry);
    }
  }
  return undefined;
}

function safeList(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}

/** A process's CPU time (user + system, s) and resident memory (MB) now, or undefined once it is gone. */
export interface ProcessSample {
  readonly at: number;
  readonly cpuSeconds: number;
  readonly rssMb: number;
}

/** Reads `/proc/<pid>/stat` and `/proc/<pid>/status`. */
export function sampleProcess(pid: number | undefined): ProcessSample | undefined {
  if (pid === undefined) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // after "pid (comm) ": field 3 onwards
    const cpuSeconds = (Number(fields[11]) + Number(fields[12])) / TICKS; // utime, stime (fields 14, 15)
    const rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
    return { at: performance.timeOrigin + performance.now(), cpuSeconds, rssMb: rssKb / 1024 };
  } catch {
    return undefined;
  }
}

/** The backend's CPU (% of one core) between two samples, and its memory at the second; nulls when unknown. */
export function backendWindow(from: ProcessSample | undefined, to: ProcessSample | undefined): { cpuPercent: number | null; rssMb: number | null } {
  if (!from || !to) return { cpuPercent: null, rssMb: null };
  return { cpuPercent: ((to.cpuSeconds - from.cpuSeconds) * 100_000) / (to.at - from.at), rssMb: to.rssMb };
}
