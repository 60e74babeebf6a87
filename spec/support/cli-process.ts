/** `npx monglock` as the CLI specs run it: a spawned process (lib/cli.ts under tsx), its real output and exit code. */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { expect } from 'chai';
import { sleep } from './fixture';

const ROOT = resolve(__dirname, '..', '..');
const CLI = ['--import', 'tsx', 'lib/cli.ts'];

/** Runs the CLI to its end (killed after 30 s: a hung CLI never outlives the test): exit code, stdout, stderr. */
export function runCli(args: string[], input = ''): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [...CLI, ...args], { cwd: ROOT, env: { ...process.env, MONGODB_URI: undefined } });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.stdin.end(input);
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('exit', (code) => {
      clearTimeout(killer);
      done({ code, out, err });
    });
  });
}

/** A running `monglock watch`: the lines it printed so far. */
export interface WatchingCli {
  readonly lines: string[];
  /** Waits (up to 10 s) for a printed line that matches `pattern`; fails with the lines seen. */
  until(pattern: RegExp): Promise<void>;
  /** Stops it as Ctrl-C does (SIGINT); resolves its exit code. Call it in a `finally`: the watcher never outlives the test. */
  stop(): Promise<number | null>;
}

/** Starts `monglock watch <args>`. */
export function watchCli(args: string[]): WatchingCli {
  const child = spawn(process.execPath, [...CLI, 'watch', ...args], { cwd: ROOT });
  const lines: string[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => lines.push(line));
  const exited = new Promise<number | null>((done) => child.once('exit', done));
  return {
    lines,
    async until(pattern: RegExp): Promise<void> {
      for (let i = 0; i < 200 && !lines.some((line) => pattern.test(line)); i++) await sleep(50);
      expect(lines.some((line) => pattern.test(line)), `a line matching ${pattern} in:\n${lines.join('\n')}`).to.equal(true);
    },
    stop(): Promise<number | null> {
      child.kill('SIGINT');
      return exited;
    },
  };
}
