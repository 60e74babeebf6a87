import { validateHeaderName, validateHeaderValue } from 'node:http';
import type { Request } from '@hapi/hapi';
import type { JsonReplacer } from './route-commit';

/** What hapi's transmit reads of a response object (hapi 20/21). */
interface SentResponse {
  readonly statusCode?: unknown;
  readonly headers?: Record<string, unknown>;
  readonly contentType?: unknown;
  readonly variety?: unknown;
  readonly source?: unknown;
  readonly settings?: { readonly message?: unknown; readonly stringify?: { replacer?: JsonReplacer; space?: number | string } | null };
}

/** A cookie as hapi keeps it for the response (`h.state()`, `h.unstate()`), formatted by the server's state definitions. */
interface State {
  readonly name: string;
  readonly value?: unknown;
  readonly options?: object;
}

/** The part of hapi's state definitions (`server.states`) that formats cookies into `set-cookie` headers. */
interface States {
  readonly cookies?: Record<string, { autoValue?: unknown }>;
  format(cookies: State[], context?: unknown): Promise<unknown>;
}

/**
 * Why hapi could not send `request.response` as it is about to (in onPreResponse), or undefined:
 * what its transmit can still fail on that depends on the response, checked as Node and hapi
 * check it: each header's name and value (and the content type and status message hapi adds), the
 * status code, each cookie set or unset (formatted by the server's own state definitions), and
 * the payload's JSON serialization with the response's formatting. A commit is applied only when
 * this finds nothing: hapi has no hook after it writes the status line.
 */
export async function unsendable(request: Request): Promise<string | undefined> {
  const response = request.response as SentResponse | null;
  if (typeof response !== 'object' || response === null) return undefined;
  return headerFailure(response) ?? (await cookieFailure(request)) ?? payloadFailure(request, response);
}

/** The first header (status line included) Node would refuse to write. */
function headerFailure(response: SentResponse): string | undefined {
  const status = response.statusCode;
  if (typeof status === 'number' && !(Number.isInteger(status) && status >= 100 && status <= 999)) return `the status code ${status} is no HTTP status`;
  const headers: Array<[string, unknown]> = Object.entries(response.headers ?? {});
  if (typeof response.contentType === 'string') headers.push(['content-type', response.contentType]);
  if (typeof response.settings?.message === 'string') headers.push(['status message', response.settings.message]);
  for (const [name, value] of headers) {
    if (value === undefined) continue;
    try {
      if (name !== 'status message') validateHeaderName(name);
      for (const each of Array.isArray(value) ? value : [value]) validateHeaderValue(name, each);
    } catch (error) {
      return `the header ${JSON.stringify(name)} cannot be written: ${(error as Error).message}`;
    }
  }
  return undefined;
}

/** Why the server's state definitions cannot format the cookies the response sets or unsets (hapi's internal `request._states`). */
async function cookieFailure(request: Request): Promise<string | undefined> {
  const states = request.server.states as unknown as States;
  const set = Object.values((request as unknown as { _states?: Record<string, State> })._states ?? {});
  // A cookie's static autoValue goes out unless the request carries it (a function's is left alone: calling it may do anything).
  for (const [name, { autoValue }] of Object.entries(states.cookies ?? {})) {
    if (autoValue !== undefined && typeof autoValue !== 'function' && !set.some((state) => state.name === name) && !(name in (request.state ?? {}))) set.push({ name, value: autoValue });
  }
  if (set.length === 0 || typeof states.format !== 'function') return undefined;
  try {
    await states.format(set, request);
    return undefined;
  } catch (error) {
    return `a cookie cannot be formatted: ${(error as Error).message}`;
  }
}

/** Why hapi cannot serialize the response's plain payload as it would (`response.spaces()`, `.replacer()`, the route's `json`). */
function payloadFailure(request: Request, response: SentResponse): string | undefined {
  if (response.variety !== 'plain') return undefined;
  const source = response.source;
  const options = response.settings?.stringify;
  const jsonify = source !== null && source !== undefined && typeof source !== 'string';
  if (!jsonify) return options ? 'formatting options (spaces, replacer, suffix) are set on a payload that is no object' : undefined;
  const json = (request.route.settings.json ?? {}) as { replacer?: JsonReplacer; space?: number | string };
  try {
    JSON.stringify(source, (options?.replacer ?? json.replacer) as never, options?.space ?? json.space);
    return undefined;
  } catch (error) {
    return `the payload cannot be serialized: ${String(error)}`;
  }
}
