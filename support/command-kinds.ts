/** Which monitored commands are whose: shared by the tests and the benchmarks. */

/** True for a command of a change stream (a process's waiters' change feed): its `aggregate`, and `getMore`/`killCursors` (no lock call reads a cursor). */
export function isChangeStreamCommand(event: { readonly commandName: string; readonly command?: { readonly pipeline?: unknown } }): boolean {
  if (event.commandName === 'getMore' || event.commandName === 'killCursors') return true;
  const first: unknown = Array.isArray(event.command?.pipeline) ? event.command.pipeline[0] : undefined;
  return event.commandName === 'aggregate' && typeof first === 'object' && first !== null && '$changeStream' in first;
}
