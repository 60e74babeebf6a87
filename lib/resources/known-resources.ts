/** How many resource names a client remembers: those it used last. */
export const REMEMBERED_RESOURCES = 1_000;

/**
 * The resources a client has seen exist, so that it locks them without the creating upsert; only
 * the {@link REMEMBERED_RESOURCES} it used last, so that a new name per request cannot grow it
 * without bound. Forgetting costs a round trip, never correctness: a forgotten resource's document
 * is ensured again (an upsert that finds it), and a remembered one that was purged meanwhile is
 * refused `RessourceNotFound` by the checked update, forgotten, and created again.
 */
export class KnownResources {
  /** In the order of last use, oldest first (a `Set` iterates in insertion order). */
  private readonly names = new Set<string>();

  constructor(private readonly limit: number = REMEMBERED_RESOURCES) {}

  /** Whether `name` is remembered; a hit makes it the most recently used. */
  has(name: string): boolean {
    if (!this.names.delete(name)) return false;
    this.names.add(name);
    return true;
  }

  /** Remembers `name` as the most recently used, forgetting the least recently used beyond the limit. */
  add(name: string): void {
    this.names.delete(name);
    this.names.add(name);
    for (const oldest of this.names) {
      if (this.names.size <= this.limit) break;
      this.names.delete(oldest);
    }
  }

  /** Forgets `name` (its document was purged). */
  delete(name: string): void {
    this.names.delete(name);
  }
}
