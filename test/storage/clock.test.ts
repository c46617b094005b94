import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Clock, isoMicros } from '../../src/storage/engine/clock.js';

/** The instant spelled out from scratch, as `isoMicros` must give it whatever it made before. */
function spelled(micros: number): string {
  const ms = Math.floor(micros / 1000);
  return `${new Date(ms).toISOString().slice(0, 23)}${String(micros % 1000).padStart(3, '0')}Z`;
}

describe('isoMicros', () => {
  it('gives the instant with microseconds for any sequence, repeated milliseconds included', () => {
    const micros = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            micros,
            micros.map((m) => m - (m % 1000)),
          ),
        ),
        (values) => {
          // Neighbours in the same millisecond, as a bulk write makes them.
          const sequence = values.flatMap((m) => [m, m + 1 - ((m + 1) % 1000 === 0 ? 1 : 0)]);
          for (const m of sequence) expect(isoMicros(m)).toBe(spelled(m));
        },
      ),
      { numRuns: 300 },
    );
    expect(isoMicros(1_700_000_000_123_456)).toBe('2023-11-14T22:13:20.123456Z');
  });

  it('hands out strictly increasing instants from the clock', () => {
    const clock = new Clock();
    const ticks = Array.from({ length: 2000 }, () => clock.next());
    for (let i = 1; i < ticks.length; i++) {
      expect(ticks[i]!.micros).toBeGreaterThan(ticks[i - 1]!.micros);
      expect(ticks[i]!.iso > ticks[i - 1]!.iso).toBe(true);
      expect(ticks[i]!.iso).toBe(spelled(ticks[i]!.micros));
    }
  });
});
