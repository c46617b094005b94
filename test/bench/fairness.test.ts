import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { NOISY_QUERIES, QUIET_KINDS, runFairness } from '../../bench/fairness.js';
import { renderTable } from '../../bench/table.js';
import { tempDir } from '../helpers/temp-dir.js';

const work = tempDir('bench-fairness-');

// `npm run bench -- --fairness` on a tiny dataset: the report's shape, never its timings.
describe('bench --fairness smoke run', () => {
  it('reports the quiet project idle and loaded, the targets and the noisy project answers', async () => {
    const logged: string[] = [];
    const results = await runFairness({
      patients: 2,
      memoryFactor: 0,
      reps: 1,
      otherReps: 1,
      fastReps: 1,
      uploadPatients: 0,
      scimUsers: 0,
      scimRequests: { lookups: 0, creates: 0, patches: 0 },
      store: 'file',
      durability: 'write',
      synthea: false,
      seed: 3,
      workDir: work,
      quietRequests: 8,
      noisyParallel: 3,
      log: (line) => logged.push(line),
    });
    const byKey = new Map(results.figures.map((f) => [f.key, f]));
    const keys = [
      'fairness.resources',
      ...['idle', 'loaded'].flatMap((phase) => [
        `fairness.quiet.${phase}.p50`,
        `fairness.quiet.${phase}.p99`,
      ]),
      'fairness.quiet.p99Ratio',
      'fairness.quiet.serverErrors',
      'fairness.quiet.otherFailures',
      ...QUIET_KINDS.flatMap((kind) =>
        ['idle', 'loaded'].map((phase) => `fairness.quiet.${kind}.${phase}.p99`),
      ),
      ...['requests', 'ok', 'tooCostly', 'otherBadRequest', 'throttled', 'serverErrors', 'slowest'].map(
        (k) => `fairness.noisy.${k}`,
      ),
    ];
    for (const key of keys) {
      expect(byKey.has(key), key).toBe(true);
      expect(Number.isFinite(byKey.get(key)!.value), key).toBe(true);
    }
    expect(byKey.get('fairness.resources')!.value).toBeGreaterThan(700);
    // The quiet project's requests all answered 2xx: its token, read and search work.
    expect(byKey.get('fairness.quiet.serverErrors')!.value).toBe(0);
    expect(byKey.get('fairness.quiet.otherFailures')!.value).toBe(0);
    for (const key of ['fairness.quiet.p99Ratio', 'fairness.quiet.serverErrors', 'fairness.noisy.slowest'])
      expect(typeof byKey.get(key)!.pass, key).toBe('boolean');
    // Every answer of the noisy project is counted once; the verbatim URLs are refused
    // at the default bounds, the others run.
    const noisy = ['ok', 'tooCostly', 'otherBadRequest', 'throttled', 'serverErrors'].map(
      (k) => byKey.get(`fairness.noisy.${k}`)!.value,
    );
    expect(noisy.reduce((a, b) => a + b)).toBe(byKey.get('fairness.noisy.requests')!.value);
    const single = results.samples.single as { key: string; status: number; code?: string }[];
    expect(single.map((s) => s.key)).toEqual(NOISY_QUERIES.map((q) => q.key));
    for (const key of ['text50', 'sort9', 'offset11995'])
      expect(
        single.find((s) => s.key === key),
        key,
      ).toMatchObject({ status: 400, code: 'too-costly' });
    for (const key of ['missing', 'everything', 'text25', 'sort5', 'offset9995'])
      expect(single.find((s) => s.key === key)!.status, key).toBe(200);
    expect(results.meta.store).toBe('file');
    expect(logged.some((line) => line.includes('loaded phase'))).toBe(true);
    expect(renderTable(results)).toContain('Quiet project p99 loaded / idle');
    expect(JSON.parse(JSON.stringify(results))).toEqual(results);
    expect(fs.readdirSync(work)).toEqual([]);
  });
});
