/**
 * Promise libraries whose promises monglock's types know, keyed by any name: `library` is the
 * type of what is passed as the `Promise` option, `promise` the promise it makes for a `T`.
 * Importing `monglock/bluebird` adds bluebird; add another library by declaration merging:
 * ```ts
 * declare module 'monglock' {
 *   interface PromiseLibraries<T> { mine: { library: typeof MyPromise; promise: MyPromise<T> } }
 * }
 * ```
 * (TypeScript cannot turn the type of a constructor into the type of its promise of a given `T`
 * by itself: this registry is how the `Promise` option's promises get their own type.)
 */
// eslint-disable-next-line @typescript-eslint/no-unused-vars, @typescript-eslint/no-empty-object-type -- empty until libraries are merged in, which use T
export interface PromiseLibraries<T> {}

type Registered<P, T> = {
  [K in keyof PromiseLibraries<T>]: PromiseLibraries<T>[K] extends { library: infer L; promise: infer R } ? ([P] extends [L] ? R : never) : never;
}[keyof PromiseLibraries<T>];

/**
 * The promise a method returns for a `T`, given the lock's `Promise` option `P`: that library's
 * promise when it is registered in {@link PromiseLibraries}, the native `Promise<T>` otherwise
 * (and without the option).
 */
export type PromiseOf<P, T> = [Registered<P, T>] extends [never] ? Promise<T> : Registered<P, T>;
