import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { RESOURCES_PER_PATIENT } from '../../bench/dataset.js';
import { runHuge } from '../../bench/huge.js';
import { renderMarkdown } from '../../bench/table.js';
import { POSTGRES_URL } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { tempDir } from '../helpers/temp-dir.js';

const work = tempDir('bench-huge-');

// `npm run bench -- --store postgres --huge`, on a tiny dataset: every figure, each target judged.
if (postgresTestUrl('bench --huge smoke run')) {
  describe('bench --huge smoke run', () => {
    it('loads by upload and COPY, and reports every figure with its target', async () => {
      const logged: string[] = [];
      const results = await runHuge({
        patients: 3,
        memoryFactor: 0,
        reps: 1,
        otherReps: 1,
        fastReps: 1,
        uploadPatients: 1,
        scimUsers: 250,
        scimRequests: { lookups: 0, creates: 0, patches: 0 },
        auditRequests: 0,
        store: 'postgres',
        databaseUrl: POSTGRES_URL!,
        groupPercent: 50,
        synthea: false,
        seed: 5,
        workDir: work,
        searchRuns: 1,
        log: (line) => logged.push(line),
      });
      const byKey = new Map(results.figures.map((f) => [f.key, f]));
      for (const key of [
        'huge.upload.rate',
        'huge.upload.projectedHours',
        'huge.copy.rate',
        'huge.copy.indexMs',
        'huge.memory.loadRss',
        'huge.db.perResource',
        'huge.export.system.ms',
        'huge.export.copyRatio',
        'huge.download.rate',
        'huge.export.group.ratio',
        'huge.memory.exportRssRatio',
        'huge.memory.workerRatio',
        ...['token', 'tokenCount', 'prefix', 'month', 'chain'].map((k) => `huge.search.${k}`),
        'huge.scim.page',
        'huge.scim.lastOverFirst',
        'huge.memory.benchRss',
      ]) {
        expect(byKey.has(key), key).toBe(true);
        expect(Number.isFinite(byKey.get(key)!.value), key).toBe(true);
      }
      // Every resource generated is live: the upload's patient and the two copied.
      expect((results.samples.copy as { resources: number }).resources).toBe(2 * RESOURCES_PER_PATIENT);
      expect(byKey.get('huge.resources')!.value).toBeGreaterThanOrEqual(3 * RESOURCES_PER_PATIENT);
      for (const f of results.figures.filter((f) => f.target)) expect(typeof f.pass, f.key).toBe('boolean');
      expect(results.figures.filter((f) => f.target).length).toBeGreaterThanOrEqual(12);
      expect(logged.some((line) => line.includes('load averages'))).toBe(true);
      expect(renderMarkdown([results])).toContain('Group export / system export');
      expect(fs.readdirSync(work)).toEqual([]);
    });
  });
}
