import type { Request } from '@hapi/hapi';

/** True when the answer is a failure, whatever its kind: a boom, or a response with a status of 400 or more. */
export function failedAnswer(request: Request): boolean {
  const response = request.response as { isBoom?: boolean; statusCode?: unknown } | null;
  return response?.isBoom === true || (typeof response?.statusCode === 'number' && response.statusCode >= 400);
}

/**
 * True when the answer, as settled, sends the route's whole body: a success other than 204, 205
 * or 206, to a request that is neither HEAD nor a range request (hapi would cut a range from it).
 */
export function carriesLock(request: Request): boolean {
  const statusCode = (request.response as { statusCode?: unknown } | null)?.statusCode;
  const whole = typeof statusCode === 'number' && statusCode >= 200 && statusCode < 300 && ![204, 205, 206].includes(statusCode);
  return whole && !failedAnswer(request) && request.method !== 'head' && request.headers.range === undefined;
}

/** True when the route's answer carried the lock and went out (a checkout's lock reached its client; not a 304 hapi made of it). */
export function delivered(request: Request): boolean {
  return carriesLock(request) && request.info.responded > 0;
}
