import type { BoomLike } from '../../common/errors';

/** A boom module's 503 factory, which {@link BoomLike} does not require. */
type WithServerUnavailable = { serverUnavailable?: (message?: string, data?: unknown) => Error };

/**
 * A 503 boom (`serverUnavailable`) of the plugin's boom module, else of `@hapi/boom` (hapi's
 * own), for a request the plugin refuses because the server is stopping: nothing was done, the
 * client may retry elsewhere.
 */
export function serverUnavailable(boom: BoomLike, message: string): Error {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const factory = (boom as WithServerUnavailable).serverUnavailable ?? (require('@hapi/boom') as Required<WithServerUnavailable>).serverUnavailable;
  return factory.call(boom, message);
}

/**
 * The acquisitions of a server's locked requests still on their way: their waits end with a 503
 * once the server begins to stop, and none starts while it stops.
 */
export class Acquisitions {
  /** Each acquisition on its way, and the controller of its wait. */
  private readonly waits = new Map<Promise<unknown>, AbortController | undefined>();
  /** Set once the server begins to stop: the reason its waits were ended with. */
  private stopped: Error | undefined;

  constructor(private readonly boom: BoomLike) {}

  /** @throws a boom 503 while the server stops: no wait for a lock starts then. */
  refuseWhileStopping(): void {
    if (this.stopped) throw serverUnavailable(this.boom, 'monglock: the server is stopping');
  }

  /** Follows `acquisition`, whose wait `waiting` ends; returns it, rejected with a boom 503 when a stop ended its wait. */
  follow<T>(acquisition: Promise<T>, waiting: AbortController | undefined): Promise<T> {
    this.waits.set(acquisition, waiting);
    const forget = (): void => void this.waits.delete(acquisition);
    acquisition.then(forget, forget);
    return acquisition.catch((error: unknown) => {
      // Its wait ended by the stop (not by hapi answering first): 503, nothing held.
      throw this.stopped !== undefined && waiting?.signal.reason === this.stopped ? serverUnavailable(this.boom, 'monglock: the server is stopping; the request waited for its lock') : error;
    });
  }

  /** The server starts (again): waits are allowed. */
  starting(): void {
    this.stopped = undefined;
  }

  /** The server begins to stop: ends every wait (answered 503) and refuses new ones. */
  stopping(): void {
    this.stopped ??= new Error('monglock: the server began to stop while the request waited for its lock');
    this.endWaits(this.stopped);
  }

  /** The server stopped: ends the waits left, and resolves once every acquisition has settled (abandoned, or holding its lock). */
  async settled(): Promise<void> {
    this.endWaits(new Error('monglock: the server stopped while the request waited for its lock'));
    await Promise.allSettled([...this.waits.keys()]);
  }

  private endWaits(reason: Error): void {
    for (const waiting of this.waits.values()) waiting?.abort(reason);
  }
}
