import { keyOf } from './document-key';

/** A change whose event does not say which document it touched (a backend whose update events name none). */
export const SOME_DOCUMENT: unique symbol = Symbol('some document');
/** The stream broke or restarted without continuity: any document may have changed unheard. */
export const ANY_DOCUMENT: unique symbol = Symbol('any document');

/** Told of each change to the lock field of a document: its `_id`, {@link SOME_DOCUMENT} or {@link ANY_DOCUMENT}. */
export type ChangeListener = (id: unknown) => void;

/** The listeners of a change feed, told of the documents a batch of events changed once the batch is read (a document changed several times in it, once). */
export class ChangeListeners {
  private readonly listeners = new Set<ChangeListener>();
  /** Documents changed since the listeners were last told, by key ('' for {@link SOME_DOCUMENT}). */
  private pending = new Map<string, unknown>();

  get size(): number {
    return this.listeners.size;
  }

  add(listener: ChangeListener): void {
    this.listeners.add(listener);
  }

  /** Removes `listener`; false when it was not there. */
  delete(listener: ChangeListener): boolean {
    return this.listeners.delete(listener);
  }

  /** Document `id` (or {@link SOME_DOCUMENT}) changed: the listeners are told once the batch it came in is read. */
  changed(id: unknown): void {
    if (this.pending.size === 0) setImmediate(() => this.flush());
    this.pending.set(id === SOME_DOCUMENT ? '' : keyOf(id), id);
  }

  /** Tells every listener of `id` now. */
  tell(id: unknown): void {
    for (const listener of this.listeners) listener(id);
  }

  private flush(): void {
    const changed = this.pending;
    this.pending = new Map();
    if (changed.has('')) this.tell(SOME_DOCUMENT);
    for (const [key, id] of changed) if (key !== '') this.tell(id);
  }
}
