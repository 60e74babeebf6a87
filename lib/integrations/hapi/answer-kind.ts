import type { Request } from '@hapi/hapi';

/** True when the answer is a failure, whatever its kind: a boom, or a response with a status of 400 or more. */
export function failedAnswer(request: Request): boolean {
  const response = request.response as { isBoom?: boolean; statusCode?: unknown } | null;
  return response?.isBoom === true || (typeof response?.statusCode === 'number' && response.statusCode >= 400);
}

/**
 * True when the answer, as settled, sends the route's body: a success other than 204 or 205, to
 * a request other than HEAD. (Whether hapi then cuts a range from it is known once it is sent:
 * {@link delivered}.)
 */
export function carriesLock(request: Request): boolean {
  const statusCode = (request.response as { statusCode?: unknown } | null)?.statusCode;
  const withBody = typeof statusCode === 'number' && statusCode >= 200 && statusCode < 300 && statusCode !== 204 && statusCode !== 205;
  return withBody && !failedAnswer(request) && request.method !== 'head';
}

/**
 * True when the answer's source holds the lock's id: route code other than the handler (a pre
 * method's takeover) answered with the lock's JSON, or a value that includes it.
 */
export function holdsLockId(request: Request, id: string): boolean {
  const source = (request.response as { source?: unknown } | null)?.source;
  if (typeof source !== 'object' || source === null) return typeof source === 'string' && source.includes(id);
  try {
    return JSON.stringify(source)?.includes(id) === true;
  } catch {
    return false;
  }
}

/**
 * True when the route's answer carried the lock's whole JSON and went out: not a 304 hapi made
 * of it, nor a 206 of part of it (a 206 whose range is the whole body counts).
 */
export function delivered(request: Request): boolean {
  if (!carriesLock(request) || request.info.responded === 0) return false;
  const response = request.response as { statusCode?: unknown; headers?: Record<string, unknown> } | null;
  if (response?.statusCode !== 206) return true;
  const range = /^bytes 0-(\d+)\/(\d+)$/.exec(String(response.headers?.['content-range'] ?? ''));
  return range !== null && Number(range[1]) + 1 === Number(range[2]);
}

/**
 * True when the body that went out is the lock's JSON as far as the plugin can tell: its source
 * holds the lock's id, or it is the handler's stream (read as it is sent). An answer an
 * onPreResponse extension replaced after monglock's (an envelope without the lock) is not.
 */
export function holdsLockJson(request: Request, id: string, handlerFinished: boolean): boolean {
  return holdsLockId(request, id) || (handlerFinished && (request.response as { variety?: unknown } | null)?.variety === 'stream');
}
