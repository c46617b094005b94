/** Small statistics and timing helpers shared by the measurements. */

/** The median of `values` (the mean of the two middle values for an even count); NaN when empty. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** The `p`-th percentile (0–100) of `values`, nearest-rank method; NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1]!;
}

/** Milliseconds since an arbitrary origin, sub-millisecond precision. */
export function now(): number {
  return performance.now();
}

/** Runs `fn` `reps` times in sequence and returns every duration (ms) with the last result. */
export async function repeat<T>(
  reps: number,
  fn: (rep: number) => Promise<T>,
): Promise<{ ms: number[]; last: T }> {
  const ms: number[] = [];
  let last: T | undefined;
  for (let rep = 0; rep < reps; rep++) {
    const start = now();
    last = await fn(rep);
    ms.push(now() - start);
  }
  return { ms, last: last as T };
}

/** A ratio rounded to 3 significant decimals (NaN-safe). */
export function ratio(a: number, b: number): number {
  return b > 0 ? Math.round((a / b) * 1000) / 1000 : Number.NaN;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
