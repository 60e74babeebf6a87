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
