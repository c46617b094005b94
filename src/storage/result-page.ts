import { InvalidRecordError } from './errors.js';
import type { ResourceCursor, ResourceQuery, SortValue } from './query-types.js';

/*
 * The order and the page of `searchResources`, shared by the adapters that sort or filter in
 * JavaScript: the comparison of `ResourceQuery.order` values, positions (`after` / `before`) and the
 * window of matches a page keeps.
 */

/**
 * The open ends of a date, number or quantity range as sort values (finite numbers: cursors are
 * JSON): the lowest sorts an open start first ascending, the highest an open end first descending.
 */
export const SORT_LOWEST = -Number.MAX_VALUE;
export const SORT_HIGHEST = Number.MAX_VALUE;

/**
 * Compares two lists of sort values (`ResourceOrder.keys`) key by key: numbers by value, strings by
 * UTF-16 code units (the `"C"` collation on ASCII), `descending` keys reversed; a `null` (no value)
 * sorts after every value in either direction. 0 when every key is equal (the id then decides).
 */
export function compareSortValues(
  a: readonly SortValue[],
  b: readonly SortValue[],
  descending: readonly boolean[],
): number {
  for (let i = 0; i < descending.length; i++) {
    const x = a[i] ?? null;
    const y = b[i] ?? null;
    if (x === y) continue;
    if (x === null) return 1;
    if (y === null) return -1;
    let c: number;
    if (typeof x === typeof y) c = x < y ? -1 : x > y ? 1 : 0;
    else c = typeof x === 'number' ? -1 : 1; // never mixed in practice: numbers first
    if (c !== 0) return descending[i] ? -c : c;
  }
  return 0;
}

const INSTANT = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$/;

/**
 * The microseconds since the epoch of a FHIR instant (`meta.lastUpdated`: the stores write 6
 * fraction digits; fewer or more are read too). Throws `InvalidRecordError` for anything else.
 */
export function instantMicros(instant: string): number {
  const m = INSTANT.exec(instant);
  const ms = m ? Date.parse(`${m[1]!}${m[3]!}`) : Number.NaN;
  if (!m || Number.isNaN(ms)) throw new InvalidRecordError(`Not a FHIR instant: ${instant.slice(0, 40)}`);
  const fraction = (m[2] ?? '').padEnd(6, '0').slice(0, 6);
  return ms * 1000 + Number(fraction);
}

/** What an adapter knows of a match to place it in the query's order. */
export interface OrderedItem {
  id: string;
  /** `meta.lastUpdated` in microseconds (needed by the `_lastUpdated` sorts). */
  lastUpdatedMicros?: number;
  /** `order.keys` of the match (needed with `order`). */
  keys?: SortValue[];
}

const byId = (a: OrderedItem, b: OrderedItem): number => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/**
 * The comparison of two matches in the order `query` asks: `order` (then id), or `sort` (default
 * `_lastUpdated`, ties broken by id; `-_lastUpdated` still breaks ties by ascending id).
 */
export function compareItems(query: ResourceQuery): (a: OrderedItem, b: OrderedItem) => number {
  const { order } = query;
  if (order) {
    return (a, b) => compareSortValues(a.keys ?? [], b.keys ?? [], order.descending) || byId(a, b);
  }
  const lu = (item: OrderedItem): number => item.lastUpdatedMicros ?? 0;
  switch (query.sort ?? '_lastUpdated') {
    case '_id':
      return byId;
    case '-_id':
      return (a, b) => byId(b, a);
    case '-_lastUpdated':
      return (a, b) => lu(b) - lu(a) || byId(a, b);
    case '_lastUpdated':
      return (a, b) => lu(a) - lu(b) || byId(a, b);
  }
}

/** The position `cursor` stands for in the order of `query`, as an item to compare with. */
export function cursorItem(query: ResourceQuery, cursor: ResourceCursor): OrderedItem {
  if (typeof cursor.id !== 'string') throw new InvalidRecordError('A cursor needs the id');
  if (query.order) {
    if (!Array.isArray(cursor.keys) || cursor.keys.length !== query.order.descending.length) {
      throw new InvalidRecordError('A cursor of an order needs one value per sort key');
    }
    return { id: cursor.id, keys: cursor.keys };
  }
  const sort = query.sort ?? '_lastUpdated';
  if (sort === '_id' || sort === '-_id') return { id: cursor.id };
  if (cursor.lastUpdated === undefined) {
    throw new InvalidRecordError('A cursor of a _lastUpdated sort needs lastUpdated');
  }
  return { id: cursor.id, lastUpdatedMicros: instantMicros(cursor.lastUpdated) };
}

/**
 * The page of a query, offered every match in the query's order: counts them all (`total`), and
 * keeps those of the page: after `offset` (from the start, or from `after`), at most `count`; or
 * with `before`, the `count` right before it (`offset` of the nearest skipped). Holds at most
 * `offset + count` values with `before`, `count` otherwise.
 */
export class PageWindow<T> {
  total = 0;
  readonly #offset: number;
  readonly #count: number;
  readonly #compare: (a: OrderedItem, b: OrderedItem) => number;
  readonly #after: OrderedItem | undefined;
  readonly #before: OrderedItem | undefined;
  #skipped = 0;
  #kept: T[] = [];

  constructor(query: ResourceQuery) {
    if (query.after && query.before) throw new InvalidRecordError('A query takes after or before, not both');
    this.#offset = Math.max(0, query.offset ?? 0);
    this.#count = query.count === undefined ? Infinity : Math.max(0, query.count);
    this.#compare = compareItems(query);
    this.#after = query.after ? cursorItem(query, query.after) : undefined;
    this.#before = query.before ? cursorItem(query, query.before) : undefined;
  }

  /** True when the window keeps nothing whatever is offered (`count` 0): only `total` is wanted. */
  get countOnly(): boolean {
    return this.#count === 0;
  }

  /**
   * True when no later match can change the page: it holds `count` matches, or wants none (not
   * with `before`, whose page is the last matches before the cursor).
   */
  get full(): boolean {
    return !this.#before && this.#kept.length >= this.#count;
  }

  /** The next match, in order, and what to keep of it when it is on the page. */
  offer(item: OrderedItem, value: T): void {
    this.total += 1;
    if (this.#count === 0) return;
    if (this.#before) {
      if (this.#compare(item, this.#before) >= 0) return;
      this.#kept.push(value);
      const room = this.#offset + this.#count;
      // Trimmed in bulk, not one shift per match.
      if (this.#kept.length >= 2 * room + 64) this.#kept = this.#kept.slice(-room);
      return;
    }
    if (this.#after && this.#compare(item, this.#after) <= 0) return;
    if (this.#skipped < this.#offset) {
      this.#skipped += 1;
      return;
    }
    if (this.#kept.length < this.#count) this.#kept.push(value);
  }

  /** The page, in the query's order. */
  page(): T[] {
    if (!this.#before) return this.#kept;
    const room = this.#offset + this.#count;
    const last = this.#kept.slice(-room);
    return last.slice(0, Math.max(0, last.length - this.#offset));
  }
}

/**
 * The first `k` of `items` in the order `compare` gives, sorted: a bounded max-heap when `k` is
 * small next to the items (O(n log k), for the first page of a large match set), else a full sort
 * of a copy. `items` is left as it was.
 */
export function firstInOrder<T>(items: readonly T[], k: number, compare: (a: T, b: T) => number): T[] {
  if (k <= 0) return [];
  if (k * 8 >= items.length) return [...items].sort(compare).slice(0, k);
  const heap: T[] = [];
  // heap[0] is the largest kept: a new item smaller than it takes its place.
  const down = (from: number): void => {
    let i = from;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let top = i;
      if (l < heap.length && compare(heap[l]!, heap[top]!) > 0) top = l;
      if (r < heap.length && compare(heap[r]!, heap[top]!) > 0) top = r;
      if (top === i) return;
      [heap[i], heap[top]] = [heap[top]!, heap[i]!];
      i = top;
    }
  };
  for (const item of items) {
    if (heap.length < k) {
      heap.push(item);
      for (let i = heap.length - 1; i > 0;) {
        const parent = (i - 1) >> 1;
        if (compare(heap[i]!, heap[parent]!) <= 0) break;
        [heap[i], heap[parent]] = [heap[parent]!, heap[i]!];
        i = parent;
      }
    } else if (compare(item, heap[0]!) < 0) {
      heap[0] = item;
      down(0);
    }
  }
  return heap.sort(compare);
}
