import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { FIRST_STATISTICS_AFTER } from '../../src/storage/postgres/first-statistics.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { eventually } from '../helpers/eventually.js';
import { sleep } from '../helpers/sleep.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/*
 * A fresh schema has no planner statistics until autovacuum's next round; the store gathers the
 * first ones itself once it has written FIRST_STATISTICS_AFTER resource versions
 * (src/storage/postgres/first-statistics.ts), so that a write's lookup of current versions takes
 * the unique `resources_current` index and not a whole type's versions.
 */

if (postgresTestUrl('postgresStorage first statistics')) {
  const connectionString = POSTGRES_URL!;
  const newSchema = schemaFactory(connectionString);
  const admin = new pg.Pool({ connectionString, max: 1 });
  afterAll(() => admin.end());

  describe('postgresStorage first statistics', () => {
    it('analyzes resources once it has written enough versions, in transactions or not', async () => {
      const schema = newSchema();
      const storage = postgresStorage({ connectionString, schema });
      const table = `"${schema}".resources`;
      const stats = async () =>
        (
          await admin.query<{ manual: boolean; any: boolean }>(
            `SELECT last_analyze IS NOT NULL AS manual,
                    last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL AS any
               FROM pg_stat_user_tables WHERE relid = $1::regclass`,
            [table],
          )
        ).rows[0]!;
      const events = (from: number, count: number) =>
        Array.from({ length: count }, (_, i) => ({
          op: 'create' as const,
          resource: { resourceType: 'AuditEvent', id: `e${from + i}`, recorded: '2026-11-29T00:00:00Z' },
        }));
      try {
        const half = FIRST_STATISTICS_AFTER / 2;
        await storage.transaction((tx) => tx.writeResources('p1', events(0, half)));
        // A rolled-back transaction's writes do not count.
        await expect(
          storage.transaction(async (tx) => {
            await tx.writeResources('p1', events(half, half));
            throw new Error('roll back');
          }),
        ).rejects.toThrow('roll back');
        await storage.writeResources('p1', events(half, half - 1));
        await sleep(300); // a while in which no statistics may be gathered
        expect((await stats()).manual).toBe(false);
        await storage.writeResources('p1', events(2 * half, 1));
        await eventually('statistics of the table', async () => (await stats()).any, { intervalMs: 50 });
        // The lookup of current versions, planned for any parameters, goes by id.
        const client = await admin.connect();
        try {
          await client.query('SET plan_cache_mode = force_generic_plan');
          await client.query(
            `PREPARE lookup(text, text[], text[]) AS
             SELECT r.seq FROM unnest($2, $3) AS k(resource_type, id)
              CROSS JOIN LATERAL (SELECT seq FROM ${table}
                WHERE project_id = $1 AND resource_type = k.resource_type AND id = k.id
                  AND superseded_seq IS NULL FOR UPDATE) r`,
          );
          const { rows } = await client.query<{ 'QUERY PLAN': string }>(
            `EXPLAIN EXECUTE lookup('p1', ARRAY['AuditEvent'], ARRAY['e1'])`,
          );
          // By its id (`resources_current` or `resources_history_instance`), not a type's versions.
          expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/Index Cond: \(.*\(id = k\.id\)\)/);
        } finally {
          await client.query('DEALLOCATE ALL');
          client.release();
        }
      } finally {
        await storage.close();
      }
    });
  });
}
