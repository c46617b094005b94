/** A time from the store's clock: microseconds since the epoch and the matching FHIR instant. */
export interface Tick {
  /** Microseconds since the epoch. */
  lu: number;
  /** FHIR instant with microsecond precision (always 6 fraction digits, so strings sort). */
  iso: string;
  /** Milliseconds since the epoch. */
  ms: number;
}

export function isoMicros(lu: number): string {
  const ms = Math.floor(lu / 1000);
  return `${new Date(ms).toISOString().slice(0, 23)}${String(lu % 1000).padStart(3, '0')}Z`;
}

/**
 * Strictly increasing instants: two versions written in the same millisecond still get distinct,
 * ordered `meta.lastUpdated` values (microsecond digits), without running ahead of the wall clock
 * unless more than 1000 writes happen in one millisecond.
 */
export class Clock {
  private last = 0;

  /** Never hand out an instant at or before `lu` (used after reopening a store). */
  advanceTo(lu: number): void {
    if (lu > this.last) this.last = lu;
  }

  next(): Tick {
    const lu = Math.max(Date.now() * 1000, this.last + 1);
    this.last = lu;
    return { lu, iso: isoMicros(lu), ms: Math.floor(lu / 1000) };
  }
}
