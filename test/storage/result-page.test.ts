import { describe, expect, it } from 'vitest';
import {
  firstInOrder,
  compareSortValues,
  instantMicros,
  PageWindow,
  type OrderedItem,
} from '../../src/storage/result-page.js';
import type { ResourceQuery } from '../../src/storage/types.js';

describe('compareSortValues', () => {
  it('compares key by key, descending keys reversed, null last either way', () => {
    expect(compareSortValues(['a'], ['b'], [false])).toBeLessThan(0);
    expect(compareSortValues(['a'], ['b'], [true])).toBeGreaterThan(0);
    expect(compareSortValues([2], [10], [false])).toBeLessThan(0);
    expect(compareSortValues([null], ['a'], [false])).toBeGreaterThan(0);
    expect(compareSortValues([null], ['a'], [true])).toBeGreaterThan(0);
    expect(compareSortValues(['a', 1], ['a', 2], [false, true])).toBeGreaterThan(0);
    expect(compareSortValues(['a', null], ['a', null], [false, false])).toBe(0);
    // Code units, not locale: upper case before lower case.
    expect(compareSortValues(['Z'], ['a'], [false])).toBeLessThan(0);
  });
});

describe('instantMicros', () => {
  it('reads microseconds, fewer digits and time zones', () => {
    expect(instantMicros('2024-01-01T00:00:00.000001Z')).toBe(Date.UTC(2024, 0, 1) * 1000 + 1);
    expect(instantMicros('2024-01-01T00:00:00.5Z')).toBe(Date.UTC(2024, 0, 1) * 1000 + 500_000);
    expect(instantMicros('2024-01-01T01:00:00+01:00')).toBe(Date.UTC(2024, 0, 1) * 1000);
    expect(() => instantMicros('2024-01-01')).toThrow(/instant/);
  });
});

describe('PageWindow', () => {
  const items: OrderedItem[] = ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id }));
  const run = (query: ResourceQuery) => {
    const window = new PageWindow<string>({ sort: '_id', ...query });
    for (const item of items) window.offer(item, item.id);
    return { total: window.total, page: window.page() };
  };

  it('pages by offset, after and before a position, and counts every match', () => {
    expect(run({ offset: 1, count: 2 })).toEqual({ total: 5, page: ['b', 'c'] });
    expect(run({ after: { id: 'b' }, count: 2 })).toEqual({ total: 5, page: ['c', 'd'] });
    expect(run({ after: { id: 'bb' }, offset: 1 })).toEqual({ total: 5, page: ['d', 'e'] });
    expect(run({ before: { id: 'd' }, count: 2 })).toEqual({ total: 5, page: ['b', 'c'] });
    expect(run({ before: { id: 'd' }, count: 2, offset: 1 })).toEqual({ total: 5, page: ['a', 'b'] });
    expect(run({ before: { id: 'b' }, count: 5 })).toEqual({ total: 5, page: ['a'] });
    expect(run({ count: 0 })).toEqual({ total: 5, page: [] });
    expect(() => run({ after: { id: 'a' }, before: { id: 'b' } })).toThrow();
  });

  it('keeps a bounded window going backwards over many matches', () => {
    const window = new PageWindow<number>({ sort: '_id', before: { id: 'x9000' }, count: 3 });
    for (let i = 1000; i < 10000; i++) window.offer({ id: `x${i}` }, i);
    expect(window.page()).toEqual([8997, 8998, 8999]);
  });

  it('needs the cursor fields of the order', () => {
    expect(() => new PageWindow({ after: { id: 'a' } })).toThrow(/lastUpdated/);
    expect(
      () => new PageWindow({ order: { keys: () => [], descending: [false] }, after: { id: 'a' } }),
    ).toThrow(/sort key/);
  });
});

describe('firstInOrder', () => {
  it('answers the first k in order, by heap or by sort, leaving the items as they were', () => {
    let seed = 7;
    const next = (): number => (seed = (seed * 48271) % 2147483647) % 1000;
    const items = Array.from({ length: 5000 }, () => next());
    const copy = [...items];
    const byValue = (a: number, b: number): number => a - b;
    const sorted = [...items].sort(byValue);
    for (const k of [0, 1, 20, 100, 624, 625, 4999, 5000, 6000]) {
      expect(firstInOrder(items, k, byValue), `k=${k}`).toEqual(sorted.slice(0, k));
    }
    expect(items).toEqual(copy);
    expect(firstInOrder(items, Infinity, byValue)).toEqual(sorted);
  });
});
