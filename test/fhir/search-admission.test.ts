import { describe, expect, it } from 'vitest';
import { FhirError } from '../../src/http/http-error.js';
import { searchAdmission } from '../../src/fhir/search/search-admission.js';

/** A promise and its resolver: work the test finishes when it decides. */
function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('searchAdmission', () => {
  it("runs maxConcurrent of a project at once, queues the next in order, refuses beyond the queue; other projects' turns are their own", async () => {
    const admission = searchAdmission({ maxConcurrent: 2, maxQueued: 2, maxWaitMs: 60_000 }, 5000);
    const order: string[] = [];
    const gates = new Map<string, ReturnType<typeof gate>>();
    const start = (project: string, name: string): Promise<void> => {
      const g = gate();
      gates.set(name, g);
      return admission.run(project, async () => {
        order.push(name);
        await g.promise;
      });
    };
    const a1 = start('a', 'a1');
    const a2 = start('a', 'a2');
    const a3 = start('a', 'a3');
    const a4 = start('a', 'a4');
    const refused = start('a', 'a5');
    await expect(refused).rejects.toMatchObject({ status: 429, issueCode: 'throttled' });
    const b1 = start('b', 'b1');
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual(['a1', 'a2', 'b1']);
    expect(admission.load('a')).toEqual({ running: 2, queued: 2 });
    gates.get('a2')!.open();
    await a2;
    await new Promise((resolve) => setImmediate(resolve));
    expect(order).toEqual(['a1', 'a2', 'b1', 'a3']);
    for (const name of ['a1', 'a3', 'b1']) gates.get(name)!.open();
    await Promise.all([a1, a3, b1]);
    await new Promise((resolve) => setImmediate(resolve));
    expect(order.at(-1)).toBe('a4');
    gates.get('a4')!.open();
    await a4;
    expect(admission.load('a')).toEqual({ running: 0, queued: 0 });
  });

  it('answers 429 with Retry-After when no turn comes in maxWaitMs, and gives the deadline of the turn', async () => {
    const admission = searchAdmission({ maxConcurrent: 1, maxQueued: 5, maxWaitMs: 10 }, 3000);
    const held = gate();
    let deadline = 0;
    const before = Date.now();
    const first = admission.run('p', async (d) => {
      deadline = d;
      await held.promise;
    });
    const error = await admission.run('p', () => Promise.resolve()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FhirError);
    expect((error as FhirError).status).toBe(429);
    expect((error as FhirError).headers?.['Retry-After']).toBe('1');
    expect(deadline).toBeGreaterThanOrEqual(before + 3000);
    held.open();
    await first;
    // The waiter that gave up left the queue: the next one runs at once.
    await expect(admission.run('p', () => Promise.resolve('ran'))).resolves.toBe('ran');
  });

  it('gives the turn back when the work fails', async () => {
    const admission = searchAdmission({ maxConcurrent: 1, maxQueued: 0, maxWaitMs: 0 }, 1000);
    await expect(admission.run('p', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await expect(admission.run('p', () => Promise.resolve(1))).resolves.toBe(1);
  });
});
