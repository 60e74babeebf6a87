/**
 * A "process" for the change-feed specs: a driver client of its own (its own change feed) on a
 * test collection, whose lock commands are counted by driver command monitoring and whose change
 * streams can be watched, counted or held back.
 */
import type { ChangeStream, Collection, CommandStartedEvent, Document } from 'mongodb';
import { isChangeStreamCommand } from '../../support/command-kinds';
import { newClient } from './fixture';
import { watchedCollection } from './watched-collection';

/** What a stream process lets a test do. */
export interface StreamProcess {
  /** The collection as this process sees it (its streams go through `streams`). */
  readonly collection: Collection<Document>;
  /** Every stream it opened, in order. */
  readonly streams: ChangeStream[];
  /** Events its streams delivered to the library, in order. */
  readonly events: Document[];
  /** Lock commands it sent so far (not the change streams' aggregate, getMore and killCursors, nor the driver's own). */
  lockCommands(): number;
  /** The same, by command name. */
  readonly lockCommandNames: Map<string, number>;
  /** From now on, every read of its streams waits until `resume` is called (a stream whose getMore hangs). */
  hang(): { resume: () => void };
}

/** A new process on `collection`; `opened` may wrap each stream it opens (to drop events, say). */
export async function streamProcess(collection: Collection<Document>, opened: (stream: ChangeStream) => ChangeStream = (stream) => stream): Promise<StreamProcess> {
  const client = await newClient({ monitorCommands: true });
  let commands = 0;
  const lockCommandNames = new Map<string, number>();
  client.on('commandStarted', (event: CommandStartedEvent) => {
    if (isChangeStreamCommand(event) || ['isMaster', 'ismaster', 'hello', 'endSessions'].includes(event.commandName)) return;
    commands++;
    lockCommandNames.set(event.commandName, (lockCommandNames.get(event.commandName) ?? 0) + 1);
  });
  const streams: ChangeStream[] = [];
  const events: Document[] = [];
  let hung: Promise<void> | undefined;
  const counted = (real: ChangeStream): ChangeStream => {
    streams.push(real);
    const stream = opened(real);
    return new Proxy(stream, {
      get(target, key) {
        if (key === 'tryNext') {
          return async () => {
            if (hung) await hung;
            const event = await target.tryNext();
            if (event) events.push(event);
            return event;
          };
        }
        const value: unknown = Reflect.get(target, key, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    });
  };
  return {
    collection: watchedCollection(client, collection, counted),
    streams,
    events,
    lockCommands: () => commands,
    lockCommandNames,
    hang: () => {
      let resume!: () => void;
      hung = new Promise<void>((resolve) => (resume = resolve));
      return {
        resume: () => {
          hung = undefined;
          resume();
        },
      };
    },
  };
}
