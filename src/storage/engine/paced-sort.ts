import type { SearchPace } from './search-pace.js';

/** Items sorted by the engine's own `sort` at once: a few milliseconds of work at most. */
const RUN = 4096;

/**
 * Sorts `items` in place by `compare`, stably, as `Array.prototype.sort` does, but a bounded
 * stretch at a time: runs of `RUN` items sorted at once, then merged pairwise, with `pace` asked
 * between runs and every `RUN` items merged. Sorting a large type's matches (a `_sort` over every
 * Observation) then lets other requests run meanwhile and stops at the search's deadline, where one
 * `sort` call held the event loop for the whole of it.
 */
export async function pacedSort<T>(
  items: T[],
  compare: (a: T, b: T) => number,
  pace: SearchPace,
): Promise<T[]> {
  const n = items.length;
  if (n <= RUN) return items.sort(compare);
  for (let start = 0; start < n; start += RUN) {
    const run = items.slice(start, start + RUN).sort(compare);
    for (let i = 0; i < run.length; i++) items[start + i] = run[i]!;
    await pace.breathe();
  }
  let from = items;
  let to = new Array<T>(n);
  let moved = 0;
  for (let width = RUN; width < n; width *= 2) {
    let k = 0;
    for (let left = 0; left < n; left += 2 * width) {
      const mid = Math.min(left + width, n);
      const right = Math.min(left + 2 * width, n);
      let i = left;
      let j = mid;
      while (i < mid || j < right) {
        // Ties keep the left run's item first: the order stays stable.
        to[k++] = j >= right || (i < mid && compare(from[i]!, from[j]!) <= 0) ? from[i++]! : from[j++]!;
        if (++moved % RUN === 0 && pace.due) await pace.breathe();
      }
    }
    [from, to] = [to, from];
  }
  if (from !== items) for (let i = 0; i < n; i++) items[i] = from[i]!;
  return items;
}
