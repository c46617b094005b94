/** A time from the store's clock: microseconds since the epoch and the matching FHIR instant. */
export interface Tick {
  /** Microseconds since the epoch. */
  micros: number;
  /** FHIR instant with microsecond precision (always 6 fraction digits, so strings sort). */
  iso: string;
  /** Milliseconds since the epoch. */
  ms: number;
}

/** The millisecond part of the last instant made: a bulk write makes many in the same millisecond. */
let lastMs = Number.NaN;
let lastMsText = '';

export function isoMicros(micros: number): string {
  const ms = Math.floor(micros / 1000);
  if (ms !== lastMs) {
    lastMsText = new Date(ms).toISOString().slice(0, 23);
    lastMs = ms;
  }
  return `${lastMsText}${String(micros % 1000).padStart(3, '0')}Z`;
}

/**
 * Strictly increasing instants: two versions written in the same millisecond still get distinct,
 * ordered `meta.lastUpdated` values (microsecond digits), without running ahead of the wall clock
 * unless more than 1000 writes happen in one millisecond.
 */
export class Clock {
  private last = 0;

  /** Never hand out an instant at or before `micros` (used after reopening a store). */
  advanceTo(micros: number): void {
    if (micros > this.last) this.last = micros;
  }

  next(): Tick {
    const micros = Math.max(Date.now() * 1000, this.last + 1);
    this.last = micros;
    return { micros, iso: isoMicros(micros), ms: Math.floor(micros / 1000) };
  }
}
