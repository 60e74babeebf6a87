import type { PromiseLibrary } from './options';

/**
 * Runs `body` and returns its promise, in the caller's promise library when one was given (for
 * example bluebird); a synchronous throw becomes a rejection. The global Promise is never touched.
 */
export function inPromiseLibrary<T>(PromiseLib: PromiseLibrary | undefined, body: () => Promise<T>): Promise<T> {
  let promise: Promise<T>;
  try {
    promise = body();
  } catch (error) {
    promise = Promise.reject(error);
  }
  return (PromiseLib ? PromiseLib.resolve(promise) : promise) as Promise<T>;
}
