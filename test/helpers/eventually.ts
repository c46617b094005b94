/**
 * Waits for a condition rather than for the wall clock: calls `check` every `intervalMs` until it
 * answers something other than `undefined` or `false`, and answers that; fails naming `what` once
 * `timeoutMs` has passed. A test that sleeps a fixed time and then asserts passes or fails with
 * the machine's load; one that waits for the condition with a generous deadline does not.
 */
export async function eventually<T>(
  what: string,
  check: () => T | undefined | false | Promise<T | undefined | false>,
  { timeoutMs = 15_000, intervalMs = 10 }: { timeoutMs?: number; intervalMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}
