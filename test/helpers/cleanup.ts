import { afterEach } from 'vitest';

const pending: (() => unknown)[] = [];
// Registered while the importing test file is collected: runs after each of that file's tests.
afterEach(async () => {
  while (pending.length) await pending.pop()!();
});

/** Runs `fn` (closing a router, a store, …) after the current test; the last registered runs first. */
export function afterTest(fn: () => unknown): void {
  pending.push(fn);
}
