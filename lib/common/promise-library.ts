import type { PromiseLibrary } from './options';

/** How a call made through a promise library can be cancelled. */
export interface Cancellation {
  /** Aborts when the caller cancels the returned promise (bluebird with cancellation enabled). */
  readonly signal: AbortSignal | undefined;
  /** True when the returned promise is a bluebird promise that cannot be cancelled (cancellation disabled). */
  readonly unsupported: boolean;
}

/** The reason a call's signal aborts with when the caller cancels its promise. */
export class CancelledError extends Error {
  override readonly name = 'CancelledError';

  constructor() {
    super('The call was cancelled through its promise');
  }
}

/** How a call settled after its caller had cancelled it: nobody will see it. */
export type Unclaimed = { readonly value: unknown } | { readonly error: unknown };

/**
 * Runs `body` and returns its promise, in the caller's promise library when one was given (for
 * example bluebird); a synchronous throw becomes a rejection. The global Promise is never touched.
 *
 * With bluebird and `Bluebird.config({ cancellation: true })`, cancelling the returned promise
 * (`.cancel()`, or `.timeout()`, which cancels what it times out) aborts `cancellation.signal`,
 * which stops a waiting acquisition and releases what it wrote. bluebird runs its cancellation
 * handlers a little later than it cancels, so an outcome that arrives in between is handed to
 * `unclaimed` (which releases a lock nobody will receive).
 */
export function inPromiseLibrary<T>(
  PromiseLib: PromiseLibrary | undefined,
  body: (cancellation: Cancellation) => Promise<T>,
  unclaimed?: (outcome: Unclaimed) => void,
): Promise<T> {
  if (!PromiseLib) return run(body, { signal: undefined, unsupported: false });
  if (isBluebirdLike(PromiseLib)) {
    const promise: CancellablePromise<T> = new PromiseLib<T>((resolve, reject, onCancel) => {
      if (typeof onCancel !== 'function') {
        run(body, { signal: undefined, unsupported: true }).then(resolve, reject);
        return;
      }
      const controller = new AbortController();
      const cancel = (): void => controller.abort(new CancelledError());
      onCancel(cancel);
      const settle = (outcome: Unclaimed): void => {
        if (promise.isCancelled?.()) {
          cancel();
          unclaimed?.(outcome);
        } else if ('value' in outcome) resolve(outcome.value as T);
        else reject(outcome.error);
      };
      run(body, { signal: controller.signal, unsupported: false }).then((value) => settle({ value }), (error: unknown) => settle({ error }));
    });
    return promise;
  }
  return PromiseLib.resolve(run(body, { signal: undefined, unsupported: false })) as Promise<T>;
}

type CancellablePromise<T> = Promise<T> & { isCancelled?(): boolean };

function run<T>(body: (cancellation: Cancellation) => Promise<T>, cancellation: Cancellation): Promise<T> {
  try {
    return body(cancellation);
  } catch (error) {
    return Promise.reject(error);
  }
}

type BluebirdLike = PromiseLibrary &
  (new <T>(executor: (resolve: (value: T) => void, reject: (reason: unknown) => void, onCancel?: (handler: () => void) => void) => void) => CancellablePromise<T>);

/** bluebird (and promise libraries built like it): a constructor whose promises have `cancel()`. */
function isBluebirdLike(PromiseLib: PromiseLibrary): PromiseLib is BluebirdLike {
  const candidate: unknown = PromiseLib;
  return typeof candidate === 'function' && typeof (candidate.prototype as { cancel?: unknown } | undefined)?.cancel === 'function';
}

/**
 * A function that warns, once per lock instance that calls it, that a wait which has to wait
 * (its first attempt was refused) runs under a bluebird promise that cannot be cancelled: bluebird's
 * `.timeout()` or `.cancel()` would reject the caller's promise while the wait goes on, and a lock it
 * takes afterwards is one nobody releases (it ends with its lease).
 */
export function uncancellableWaitWarning(): (waitMs: number) => void {
  let warned = false;
  return (waitMs) => {
    if (warned) return;
    warned = true;
    process.emitWarning(
      `A waiting acquire (wait: ${waitMs} ms) is held up, and it returned a bluebird promise with cancellation disabled: ` +
        "bluebird's .timeout() or .cancel() cannot stop this wait, which goes on and may take the lock after the caller gave up " +
        '(then nobody releases it before its lease ends). Stop waits with `signal` (for example `AbortSignal.timeout(ms)`), ' +
        'or enable Bluebird.config({ cancellation: true }).',
      { code: 'MONGLOCK_UNCANCELLABLE_WAIT' },
    );
  };
}
