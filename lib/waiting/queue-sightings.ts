/** How long a sighting of other processes' tickets is taken as still true, in ms. */
const SIGHTING_MS = 150;
/** The most documents remembered (the oldest sightings are forgotten first). */
const MAX_DOCUMENTS = 1_000;

/**
 * Where this process last saw live tickets of other processes in a fair queue, by document key:
 * a hint (never a condition of a write) that lets a new fair call there take its ticket before
 * its first attempt, which such a ticket would refuse.
 */
export class QueueSightings {
  private readonly seen = new Map<string, number>();

  /** A ticket write on document `key` showed tickets of other processes (`others`), or none. */
  saw(key: string, others: boolean): void {
    this.seen.delete(key);
    if (!others) return;
    this.seen.set(key, performance.now());
    if (this.seen.size > MAX_DOCUMENTS) this.seen.delete(this.seen.keys().next().value!);
  }

  /** True when tickets of other processes were seen on document `key` within the last {@link SIGHTING_MS} ms. */
  recent(key: string): boolean {
    const at = this.seen.get(key);
    if (at === undefined) return false;
    if (performance.now() - at < SIGHTING_MS) return true;
    this.seen.delete(key);
    return false;
  }
}
