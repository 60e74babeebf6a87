import type { Acquired } from '../engine/acquired';

/** A waiter's hand-over on its way: the lock a release here handed it, until its next attempt takes it; and who waits to hear of it. */
export class HandOverSlot {
  /** The lock it resolves (undefined: none was handed, try again). */
  #grant: Promise<Acquired | undefined> | undefined;
  /** Told when a hand-over comes ({@link handedOver}). */
  readonly #listeners: Array<() => void> = [];

  /** True while a hand-over is on its way (not taken yet). */
  get granted(): boolean {
    return this.#grant !== undefined;
  }

  /** A release hands the lock over: `grant` resolves it. */
  give(grant: Promise<Acquired | undefined>): void {
    this.#grant = grant;
    for (const listener of this.#listeners.splice(0)) listener();
  }

  /** The hand-over on its way, once. */
  take(): Promise<Acquired | undefined> | undefined {
    const grant = this.#grant;
    this.#grant = undefined;
    return grant;
  }

  /** Resolves once a hand-over comes (at once if one is on its way); `stop` drops the wait. */
  handedOver(): { readonly handed: Promise<void>; stop(): void } {
    let listener = (): void => undefined;
    const handed = new Promise<void>((resolve) => (listener = resolve));
    if (this.#grant) listener();
    else this.#listeners.push(listener);
    const stop = (): void => {
      const at = this.#listeners.indexOf(listener);
      if (at >= 0) this.#listeners.splice(at, 1);
    };
    return { handed, stop };
  }
}
