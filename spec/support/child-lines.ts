import type { ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';

/** The lines a child process prints, one at a time: each call resolves the next. */
export function lineQueue(child: ChildProcessWithoutNullStreams): () => Promise<string> {
  const ready: string[] = [];
  const waiting: Array<(line: string) => void> = [];
  createInterface({ input: child.stdout }).on('line', (line) => (waiting.length ? waiting.shift()!(line) : ready.push(line)));
  return () => (ready.length ? Promise.resolve(ready.shift()!) : new Promise((resolve) => waiting.push(resolve)));
}
