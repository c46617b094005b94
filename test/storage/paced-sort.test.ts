import { describe, expect, it } from 'vitest';
import { pacedSort } from '../../src/storage/engine/paced-sort.js';
import { SearchPace } from '../../src/storage/engine/search-pace.js';
import { SearchTooCostlyError } from '../../src/storage/errors.js';

/*
 * The embedded stores sort a large type's matches a bounded stretch at a time (`pacedSort`): the
 * same order as `Array.prototype.sort`, stable, while other callbacks run and the search's deadline
 * holds.
 */

interface Item {
  key: number;
  at: number;
}

const byKey = (a: Item, b: Item): number => a.key - b.key;

/** `n` items with many equal keys, each remembering its position (to check stability). */
function items(n: number, seed: number): Item[] {
  let x = seed;
  return Array.from({ length: n }, (_, at) => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return { key: x % 97, at };
  });
}

/** A comparison that spins for 1 ms every `every` calls: a sort that costs CPU time. */
function slow(every: number): (a: Item, b: Item) => number {
  let calls = 0;
  return (a, b) => {
    if (++calls % every === 0) {
      const until = performance.now() + 1;
      while (performance.now() < until);
    }
    return byKey(a, b);
  };
}

describe('pacedSort', () => {
  it.each([0, 1, 10, 4096, 4097, 9000, 20_000])(
    'sorts %i items as Array.prototype.sort does, stably',
    async (n) => {
      const input = items(n, n + 7);
      const expected = [...input].sort(byKey);
      const sorted = await pacedSort([...input], byKey, new SearchPace());
      expect(sorted).toEqual(expected);
      for (let i = 1; i < sorted.length; i++) {
        if (sorted[i]!.key === sorted[i - 1]!.key) expect(sorted[i]!.at).toBeGreaterThan(sorted[i - 1]!.at);
      }
    },
  );

  it('sorts in place', async () => {
    const input = items(9000, 3);
    const sorted = await pacedSort(input, byKey, new SearchPace());
    expect(sorted).toBe(input);
    expect(input).toEqual([...items(9000, 3)].sort(byKey));
  });

  it('lets other callbacks run while it sorts', async () => {
    let ranDuringSort = false;
    let sorting = true;
    setImmediate(() => (ranDuringSort = sorting));
    await pacedSort(items(9000, 5), slow(2000), new SearchPace());
    sorting = false;
    expect(ranDuringSort).toBe(true);
  });

  it('stops at the deadline with SearchTooCostlyError', async () => {
    await expect(
      pacedSort(items(20_000, 9), slow(500), new SearchPace(Date.now() + 20)),
    ).rejects.toBeInstanceOf(SearchTooCostlyError);
  });
});
