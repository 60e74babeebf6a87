/**
 * `import 'monglock/bluebird'` (or `import type {} from 'monglock/bluebird'`): types the promises
 * of a lock made with `Promise: Bluebird` as bluebird's (`Bluebird<LockHandle>`, with `.catch(Class,
 * handler)`, `.timeout()`, `.cancel()`), instead of `Promise`. Types only: it loads nothing.
 * @module monglock/bluebird
 */
import type Bluebird from 'bluebird';

declare module './common/promise-types' {
  interface PromiseLibraries<T> {
    bluebird: { library: typeof Bluebird; promise: Bluebird<T> };
  }
}

export {};
