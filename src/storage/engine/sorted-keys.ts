/*
 * The sorted views of the search postings (`postings.ts`): the distinct string keys of a
 * parameter in code-unit order (prefix search), and its ordered values by each end of their
 * range (date, number and quantity prefixes). Each keeps a sorted array and an unsorted tail of
 * recent additions, merged in (linear) once the tail grows past a sixteenth of the array; removed
 * keys stay until then (the caller checks a key is still posted), so a write costs O(1).
 */

/** Tail length that triggers a merge, for a sorted array of `n`. */
const mergeAt = (n: number): number => Math.max(64, n >> 4);

function lowerBound<T>(items: readonly T[], below: (item: T) => boolean): number {
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (below(items[mid]!)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function merge<T>(a: readonly T[], b: readonly T[], before: (x: T, y: T) => boolean): T[] {
  const out = new Array<T>(a.length + b.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.length && j < b.length) out[k++] = before(b[j]!, a[i]!) ? b[j++]! : a[i++]!;
  while (i < a.length) out[k++] = a[i++]!;
  while (j < b.length) out[k++] = b[j++]!;
  return out;
}

/** Distinct string keys, for prefix lookups. */
export class SortedStrings {
  private main: string[] = [];
  private tail: string[] = [];
  private stale = 0;

  add(key: string): void {
    this.tail.push(key);
  }

  /** Counts a key no longer posted (dropped at the next merge). */
  removed(): void {
    this.stale += 1;
  }

  private settle(isLive: (key: string) => boolean): void {
    if (this.tail.length <= mergeAt(this.main.length) && this.stale <= this.main.length >> 1) return;
    const main = this.stale > 0 ? this.main.filter(isLive) : this.main;
    const tail = this.tail.filter(isLive).sort();
    const merged = merge(main, tail, (x, y) => x < y);
    this.main = merged.filter((key, i) => i === 0 || merged[i - 1] !== key);
    this.tail = [];
    this.stale = 0;
  }

  /** The keys starting with `prefix` (possibly some no longer posted, or twice). */
  *withPrefix(prefix: string, isLive: (key: string) => boolean): Iterable<string> {
    this.settle(isLive);
    const { main, tail } = this;
    for (let i = lowerBound(main, (k) => k < prefix); i < main.length && main[i]!.startsWith(prefix); i++)
      yield main[i]!;
    for (const key of tail) if (key.startsWith(prefix)) yield key;
  }
}

/** One distinct ordered value: the range it covers and its posting key. */
export interface RangeItem {
  lo: number;
  hi: number;
  key: string;
}

/** Bounds on both ends of a value's range, inclusive (a superset of what a prefix matches). */
export interface Box {
  loMin: number;
  loMax: number;
  hiMin: number;
  hiMax: number;
}

/** Distinct ordered values, sorted by each end, for range lookups. */
export class SortedRanges {
  private byLo: RangeItem[] = [];
  private byHi: RangeItem[] = [];
  private tail: RangeItem[] = [];
  private stale = 0;

  add(item: RangeItem): void {
    this.tail.push(item);
  }

  removed(): void {
    this.stale += 1;
  }

  private settle(isLive: (key: string) => boolean): void {
    if (this.tail.length <= mergeAt(this.byLo.length) && this.stale <= this.byLo.length >> 1) return;
    const live = (item: RangeItem): boolean => isLive(item.key);
    const tail = this.tail.filter(live);
    const byLo = this.stale > 0 ? this.byLo.filter(live) : this.byLo;
    const byHi = this.stale > 0 ? this.byHi.filter(live) : this.byHi;
    this.byLo = merge(
      byLo,
      [...tail].sort((x, y) => x.lo - y.lo),
      (x, y) => x.lo < y.lo,
    );
    this.byHi = merge(
      byHi,
      tail.sort((x, y) => x.hi - y.hi),
      (x, y) => x.hi < y.hi,
    );
    this.tail = [];
    this.stale = 0;
  }

  /** The keys of the values inside `box` (possibly some no longer posted, or twice). */
  *inside(box: Box, isLive: (key: string) => boolean): Iterable<string> {
    this.settle(isLive);
    const inBox = (x: RangeItem): boolean =>
      x.lo >= box.loMin && x.lo <= box.loMax && x.hi >= box.hiMin && x.hi <= box.hiMax;
    const { byLo, byHi } = this;
    const loFrom = lowerBound(byLo, (x) => x.lo < box.loMin);
    const loTo = lowerBound(byLo, (x) => x.lo <= box.loMax);
    const hiFrom = lowerBound(byHi, (x) => x.hi < box.hiMin);
    const hiTo = lowerBound(byHi, (x) => x.hi <= box.hiMax);
    // Walk the narrower of the two ranges, testing the other end on each value.
    const [items, from, to] = loTo - loFrom <= hiTo - hiFrom ? [byLo, loFrom, loTo] : [byHi, hiFrom, hiTo];
    for (let i = from; i < to; i++) if (inBox(items[i]!)) yield items[i]!.key;
    for (const item of this.tail) if (inBox(item)) yield item.key;
  }
}
