/**
 * How long a test waits for an event before it fails: generous, so that only a condition that never
 * comes fails it, not a loaded 2-core machine that is slow to reach it (it stays under the projects'
 * test timeouts, so the failure names what was awaited).
 */
export const PATIENCE_MS = 90_000;

/**
 * Waits for a condition rather than for the wall clock: calls `check` every `intervalMs` until it
 * answers something other than `undefined` or `false`, and answers that; fails naming `what` once
 * `timeoutMs` has passed. A test that sleeps a fixed time and then asserts passes or fails with
 * the machine's load; one that waits for the condition with a generous deadline does not.
 */
export async function eventually<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  { timeoutMs = PATIENCE_MS, intervalMs = 10 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Waits until the wall clock is past `ms` (epoch milliseconds) and answers the time then: for
 * instants that must fall strictly between two writes (`_since`), without sleeping a guessed while.
 */
export function clockPast(ms: number): Promise<number> {
  return eventually(`the clock to pass ${new Date(ms).toISOString()}`, () => Date.now() > ms && Date.now(), {
    intervalMs: 1,
  });
}
