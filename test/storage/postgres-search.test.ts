import pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { dateBoxSql } from '../../src/storage/postgres/search-tables.js';
import { memoryStorage, r4SearchIndexer } from '../../src/stores.js';
import type { ResourceIndexer } from '../../src/storage/search-index.js';
import type { Storage } from '../../src/storage/types.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/*
 * PostgreSQL's search index: searches answered in SQL without reading bodies, the index rows kept
 * to the current versions, and the tables rebuilt when the indexer's fingerprint changes.
 */

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

if (postgresTestUrl('postgresStorage search index')) {
  const connectionString = POSTGRES_URL!;
  const newSchema = schemaFactory(connectionString);
  const admin = new pg.Pool({ connectionString, max: 1 });
  afterAll(() => admin.end());

  /**
   * The index tables as migrations 8–13 left them (keyed by project, type and parameter texts,
   * before `search_keys`), with a stray row each, and the versions from `from` on forgotten: opening
   * the store migrates them again (migration 14 makes the tables anew and the rows are rebuilt).
   */
  const textKeyedShape = async (s: string, from: number) => {
    const tables: Record<string, string> = {
      search_tokens: 'system text, value text, display text, types jsonb, system_full text, value_full text',
      search_strings: 'norm text, exact text',
      search_dates: 'lo float8, hi float8, hlo float8, hhi float8',
      search_numbers:
        'quantity boolean, empty boolean, lo float8, hi float8, system text, unit_code text, unit text',
      search_references:
        'target_type text, target_id text, url text, version text, ident boolean, id_system text, id_value text',
      search_uris: 'value text',
    };
    await admin.query(`DROP TABLE ${s}.search_keys`);
    for (const [table, columns] of Object.entries(tables)) {
      await admin.query(`DROP TABLE ${s}.${table}`);
      await admin.query(
        `CREATE TABLE ${s}.${table} (seq bigint NOT NULL, project_id text NOT NULL, resource_type text NOT NULL,
           param text NOT NULL, elem integer, comp integer, ${columns})`,
      );
      await admin.query(
        `INSERT INTO ${s}.${table} (seq, project_id, resource_type, param)
         SELECT seq, project_id, resource_type, 'stray' FROM ${s}.resources LIMIT 1`,
      );
    }
    await admin.query(
      `CREATE INDEX search_tokens_key ON ${s}.search_tokens (project_id, resource_type, param, value)`,
    );
    await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version >= $1`, [from]);
  };

  /** The rows of `table` per parameter code, by the codes their keys number. */
  const rowsOf = async (s: string, table: string, where = 'true') =>
    (
      await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM ${s}.${table} t JOIN ${s}.search_keys k USING (key) WHERE ${where}`,
      )
    ).rows[0]!.n;

  const search = async (storage: Storage, type: string, query: string) => {
    const parsed = await parseSearch(type, new URLSearchParams(query), {}, allReads());
    return storage.searchResources('p1', type, parsed.query);
  };

  describe('postgresStorage search index', () => {
    it('answers a search in one statement, without a predicate and without reading bodies to filter', async () => {
      const storage = postgresStorage({ connectionString, schema: newSchema() });
      try {
        await storage.writeResources('p1', [
          { op: 'create', resource: { resourceType: 'Patient', id: 'ann', name: [{ family: 'Smith' }] } },
          { op: 'create', resource: { resourceType: 'Patient', id: 'bob', name: [{ family: 'Jones' }] } },
        ]);
        const writes = Array.from({ length: 1000 }, (_, i) => ({
          op: 'create' as const,
          resource: {
            resourceType: 'Observation',
            id: `o${i}`,
            status: 'final',
            code: { coding: [{ system: 'urn:c', code: i % 100 === 0 ? 'rare' : 'common' }] },
            subject: { reference: Math.floor(i / 100) % 2 ? 'Patient/ann' : 'Patient/bob' },
            effectiveDateTime: `2020-01-${String((i % 28) + 1).padStart(2, '0')}`,
          },
        }));
        await storage.writeResources('p1', writes);
        const parsed = await parseSearch(
          'Observation',
          new URLSearchParams('code=urn:c|rare&subject:Patient.name=smith&_sort=-date&_count=5'),
          {},
          allReads(),
        );
        expect(parsed.query.where).toBeUndefined();
        const query = vi.spyOn(pg.Client.prototype, 'query');
        let page;
        let statements: string[];
        try {
          page = await storage.searchResources('p1', 'Observation', parsed.query);
          // Leaving out the first statistics the store gathers after 1,000 writes, in the background.
          statements = query.mock.calls
            .map(([arg]) => (typeof arg === 'string' ? arg : (arg as { text: string }).text))
            .filter((text) => !/pg_stat_user_tables|^ANALYZE /.test(text));
        } finally {
          query.mockRestore();
        }
        expect(statements).toHaveLength(1);
        expect(statements[0]).not.toMatch(/seq = ANY/);
        // o100, o300, … (odd hundreds reference ann): 5 of the 10 rare ones; by date descending.
        expect(page.total).toBe(5);
        const expected = Array.from({ length: 5 }, (_, k) => 100 + 200 * k)
          .map((i) => ({ id: `o${i}`, day: (i % 28) + 1 }))
          .sort((a, b) => b.day - a.day || (a.id < b.id ? -1 : 1))
          .slice(0, 5)
          .map((x) => x.id);
        expect(page.resources.map((r) => r.id)).toEqual(expected);
        // The transaction view answers too.
        await storage.transaction(async (tx) => {
          expect((await tx.searchResources('p1', 'Observation', parsed.query)).total).toBe(5);
        });
      } finally {
        await storage.close();
      }
    });

    it('keeps index rows of current versions only: an update or a delete takes the old values out', async () => {
      const schema = newSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        const ann = await storage.createResource('p1', {
          resourceType: 'Patient',
          name: [{ family: 'Smith' }],
        });
        expect((await search(storage, 'Patient', 'name=smith')).total).toBe(1);
        await storage.updateResource('p1', {
          resourceType: 'Patient',
          id: ann.id,
          name: [{ family: 'Jones' }],
        });
        expect((await search(storage, 'Patient', 'name=smith')).total).toBe(0);
        expect((await search(storage, 'Patient', 'name=jones')).total).toBe(1);
        await storage.deleteResource('p1', 'Patient', ann.id);
        expect((await search(storage, 'Patient', 'name=jones')).total).toBe(0);
        const { rows } = await admin.query<{ n: number }>(
          `SELECT ((SELECT count(*) FROM ${quote(schema)}.search_strings)
                + (SELECT count(*) FROM ${quote(schema)}.search_dates))::int AS n`,
        );
        expect(rows[0]!.n).toBe(0);
      } finally {
        await storage.close();
      }
    });

    it('numbers a project’s types and parameters in the write’s own transaction: a rollback numbers nothing, each project its own', async () => {
      const schema = newSchema();
      const s = quote(schema);
      const storage = postgresStorage({ connectionString, schema });
      const device = (id: string, model: string) => ({ resourceType: 'Device', id, modelNumber: model });
      const keys = async (project: string) =>
        (
          await admin.query<{ param: string }>(
            `SELECT param FROM ${s}.search_keys WHERE project_id = $1 AND resource_type = 'Device' ORDER BY param`,
            [project],
          )
        ).rows.map((r) => r.param);
      const models = async (project: string, q: string) => {
        const parsed = await parseSearch('Device', new URLSearchParams(q), {}, allReads());
        return (await storage.searchResources(project, 'Device', parsed.query)).resources.map((r) => r.id);
      };
      try {
        await expect(
          storage.transaction(async (tx) => {
            await tx.createResource('p1', device('d0', 'm-0'));
            // Its own numbers: the transaction finds what it wrote.
            const parsed = await parseSearch('Device', new URLSearchParams('model=m-0'), {}, allReads());
            expect(
              (await tx.searchResources('p1', 'Device', parsed.query)).resources.map((r) => r.id),
            ).toEqual(['d0']);
            throw new Error('rolled back');
          }),
        ).rejects.toThrow('rolled back');
        expect(await keys('p1')).toEqual([]);
        await storage.writeResources('p1', [{ op: 'create', resource: device('d1', 'm-1') }]);
        await storage.writeResources('p2', [{ op: 'create', resource: device('d2', 'm-1') }]);
        expect(await keys('p1')).toContain('model');
        expect(await keys('p2')).toEqual(await keys('p1'));
        expect(await models('p1', 'model=m-1')).toEqual(['d1']);
        expect(await models('p2', 'model=m-1')).toEqual(['d2']);
        // A parameter no row was ever written for has no number: its test matches nothing.
        expect(await models('p1', 'udi-carrier=x')).toEqual([]);
        expect(await models('p1', 'udi-carrier:missing=true')).toEqual(['d1']);
        const { rows } = await admin.query<{ n: number }>(
          `SELECT count(DISTINCT key)::int AS n FROM ${s}.search_keys WHERE resource_type = 'Device' AND param = 'model'`,
        );
        expect(rows[0]!.n).toBe(2);
      } finally {
        await storage.close();
      }
    });

    it('rebuilds the index tables on open when the indexer fingerprint changes, and after migration 8', async () => {
      const schema = newSchema();
      const s = quote(schema);
      const nothing: ResourceIndexer = { fingerprint: 'nothing/1', index: () => ({}) };
      let storage = postgresStorage({ connectionString, schema, indexer: nothing });
      try {
        const writes = Array.from({ length: 2500 }, (_, i) => ({
          op: 'create' as const,
          resource: { resourceType: 'Patient', id: `p${i}`, name: [{ family: i === 7 ? 'Seven' : 'Other' }] },
        }));
        await storage.writeResources('p1', writes);
        await storage.updateResource('p1', {
          resourceType: 'Patient',
          id: 'p8',
          name: [{ family: 'Seven' }],
        });
        await storage.deleteResource('p1', 'Patient', 'p7');
        expect((await search(storage, 'Patient', 'name=seven')).total).toBe(0);
        await storage.close();

        storage = postgresStorage({ connectionString, schema });
        expect((await search(storage, 'Patient', 'name=seven')).resources.map((r) => r.id)).toEqual(['p8']);
        expect((await search(storage, 'Patient', 'name=other')).total).toBe(2498);
        const { rows } = await admin.query<{ fingerprint: string }>(
          `SELECT fingerprint FROM ${s}.search_index_state`,
        );
        expect(rows[0]!.fingerprint).toMatch(/^r4-/);
        await storage.close();

        // A schema at version 7 (before the index tables): migration 8 creates them, the rebuild fills them.
        for (const table of [
          'search_tokens',
          'search_strings',
          'search_dates',
          'search_numbers',
          'search_references',
          'search_uris',
          'search_index_state',
        ]) {
          await admin.query(`DROP TABLE ${s}.${table}`);
        }
        await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version = 8`);
        storage = postgresStorage({ connectionString, schema });
        expect((await search(storage, 'Patient', 'name=seven')).resources.map((r) => r.id)).toEqual(['p8']);
      } finally {
        await storage.close();
      }
    });

    it('migration 9 rebuilds a version-8 index: date hulls in a GiST index, one lookup for a range', async () => {
      const schema = newSchema();
      const s = quote(schema);
      let storage = postgresStorage({ connectionString, schema });
      try {
        await storage.writeResources('p1', [
          ...Array.from({ length: 300 }, (_, i) => ({
            op: 'create' as const,
            resource: {
              resourceType: 'Observation',
              id: `o${i}`,
              status: 'final',
              code: { coding: [{ system: 'urn:c', code: 'x' }], text: 'X ray' },
              effectiveDateTime: `${2000 + (i % 20)}-0${(i % 9) + 1}-15`,
            },
          })),
          // Two targets: one after the range's start, one before its end, neither inside it; each
          // filter of a range ANDs on the resource, so it matches (the hull spans both).
          {
            op: 'create',
            resource: {
              resourceType: 'Goal',
              id: 'spread',
              lifecycleStatus: 'active',
              description: { text: 'g' },
              subject: { reference: 'Patient/p' },
              target: [{ dueDate: '1990-01-01' }, { dueDate: '2030-01-01' }],
            },
          },
        ]);
        const range = 'date=ge2005-03&date=lt2005-04';
        const expected = (await search(storage, 'Observation', range)).resources.map((r) => r.id).sort();
        expect(expected.length).toBeGreaterThan(0);
        await storage.close();

        // A version-8 schema: its tables are made anew and filled again.
        await textKeyedShape(s, 9);
        storage = postgresStorage({ connectionString, schema });
        expect((await search(storage, 'Observation', range)).resources.map((r) => r.id).sort()).toEqual(
          expected,
        );
        expect((await search(storage, 'Observation', 'code:text=x ray')).total).toBe(300);
        const goals = async (q: string) => (await search(storage, 'Goal', q)).resources.map((r) => r.id);
        expect(await goals('target-date=ge2005-03&target-date=lt2005-04')).toEqual(['spread']);
        expect(await goals('target-date=ge2031&target-date=lt2005')).toEqual([]);
        expect(await goals('target-date=eq2005')).toEqual([]);
        expect(await goals('target-date=eq2030&target-date=eq1990')).toEqual(['spread']);
        const { rows } = await admin.query<{
          n: number;
          stray: number;
          old: string | null;
          value: string | null;
        }>(
          `SELECT (SELECT count(*) FROM ${s}.search_dates WHERE hlo IS NULL OR hhi IS NULL)::int AS n,
                  (SELECT count(*) FROM ${s}.search_keys WHERE param = 'stray')::int AS stray,
                  (SELECT string_agg(attname, ',') FROM pg_attribute
                    WHERE attrelid = '${s}.search_tokens'::regclass AND attnum > 0
                      AND attname IN ('project_id', 'resource_type', 'param')) AS old,
                  to_regclass('${schema}.search_strings_key')::text AS value`,
        );
        expect(rows[0]).toEqual({
          n: 0,
          stray: 0,
          old: null,
          value: expect.stringContaining('search_strings_key'),
        });
        expect(await rowsOf(s, 'search_dates', `k.param = 'date'`)).toBe(300);
        const plan = await admin.query<{ 'QUERY PLAN': string }>(
          `EXPLAIN SELECT seq FROM ${s}.search_dates a
            WHERE ${dateBoxSql('a.key', 'a.hlo', 'a.hhi')} && box(point(1, 0), point(2, 1))`,
        );
        expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/search_dates_span/);
      } finally {
        await storage.close();
      }
    });

    it('migration 11 rebuilds a version-10 index: token keys for index-only lookups, no _lastUpdated rows', async () => {
      const schema = newSchema();
      const s = quote(schema);
      const long = (c: string) => `${c.repeat(99)}é${c}😀`; // past KEY_CHARS, in code points
      let storage = postgresStorage({ connectionString, schema });
      try {
        await storage.writeResources('p1', [
          ...Array.from({ length: 200 }, (_, i) => ({
            op: 'create' as const,
            resource: {
              resourceType: 'Observation',
              id: `o${i}`,
              status: 'final',
              code: {
                coding: [
                  i % 3 === 0
                    ? { system: long('s'), code: i % 2 ? long('v') : 'short' }
                    : { system: 'urn:c', code: i % 2 ? `${long('v')}x` : 'short' },
                ],
              },
            },
          })),
          // A code of exactly KEY_CHARS code points, and one that is a long key's prefix.
          ...[long('v').slice(0, 100), `${long('v').slice(0, 100)}\u0001`].map((code, i) => ({
            op: 'create' as const,
            resource: {
              resourceType: 'Observation',
              id: `edge${i}`,
              status: 'final',
              code: { coding: [{ code }] },
            },
          })),
        ]);
        const queries = [
          `code=${long('s')}|${long('v')}`,
          `code=${long('s')}|`,
          `code=urn:c|${long('v')}`,
          `code=${long('v')}`,
          `code=${long('v')}x`,
          'code=short',
          `code=${long('v').slice(0, 100)}`,
          `code=|${long('v').slice(0, 100)}`,
          'code=urn:c|short',
          '_lastUpdated=gt2000&_sort=-_lastUpdated,code',
          '_lastUpdated=ne2000,2001&code=short',
          '_lastUpdated:missing=false&_count=500',
        ];
        const ids = async (q: string) => (await search(storage, 'Observation', q)).resources.map((r) => r.id);
        const answer = async (q: string) => {
          const page = await search(storage, 'Observation', q);
          return { total: page.total, ids: page.resources.map((r) => r.id) };
        };
        const before = await Promise.all(queries.map(answer));
        expect(before.map((x) => x.total)).toEqual([33, 67, 0, 33, 67, 100, 1, 1, 66, 202, 100, 202]);
        const { lastUpdated } = (await storage.readResource('p1', 'Observation', 'o0')).meta;
        // The instant's own millisecond matches `eq` to the millisecond; the next one does not.
        const ms = new Date(lastUpdated).getTime();
        const at = (t: number) => new Date(t).toISOString();
        expect(await ids(`_lastUpdated=eq${at(ms)}&_id=o0`)).toEqual(['o0']);
        expect(await ids(`_lastUpdated=ap${at(ms)},eq${at(ms + 1)}&code=short&_id=o0`)).toEqual(['o0']);
        expect(await ids(`_lastUpdated=sa${at(ms)}&_id=o0`)).toEqual([]);
        await storage.close();

        // A version-10 schema: its tables are made anew and filled again.
        await textKeyedShape(s, 11);
        storage = postgresStorage({ connectionString, schema });
        expect(await Promise.all(queries.map(answer))).toEqual(before);
        expect(await rowsOf(s, 'search_dates', `k.param = '_lastUpdated'`)).toBe(0);
        expect(
          await rowsOf(
            s,
            'search_tokens',
            `k.param = 'code' AND (value_full IS NOT NULL OR system_full IS NOT NULL)`,
          ),
        ).toBe(135);
        const { rows } = await admin.query<Record<string, string | null>>(
          `SELECT to_regclass('${schema}.search_tokens_key')::text AS key,
                  to_regclass('${schema}.search_dates_span')::text AS span`,
        );
        expect(rows[0]).toEqual({
          key: expect.stringContaining('search_tokens_key'),
          span: expect.stringContaining('search_dates_span'),
        });
        // The lookup needs no heap once VACUUM marked the pages all-visible (it cannot while another
        // session's snapshot is older; on so small a table the planner prefers other plans unless
        // told not to).
        await admin.query(`VACUUM ANALYZE ${s}.search_tokens`);
        const client = await admin.connect();
        let plan: string;
        try {
          await client.query('BEGIN');
          await client.query('SET LOCAL enable_bitmapscan = off');
          await client.query('SET LOCAL enable_seqscan = off');
          const { rows: lines } = await client.query<{ 'QUERY PLAN': string }>(
            `EXPLAIN (ANALYZE, COSTS OFF) SELECT seq FROM ${s}.search_tokens
              WHERE key = (SELECT key FROM ${s}.search_keys
                            WHERE project_id = 'p1' AND resource_type = 'Observation' AND param = 'code')
                AND value = 'short' AND system = 'urn:c'`,
          );
          plan = lines.map((r) => r['QUERY PLAN']).join('\n');
        } finally {
          await client.query('ROLLBACK');
          client.release();
        }
        expect(plan).toMatch(/Index Only Scan using search_tokens_key/);
      } finally {
        await storage.close();
      }
    });

    it('migration 12: no composite marker rows; :missing on a composite is the absence of a complete element, as the embedded stores answer', async () => {
      const schema = newSchema();
      const s = quote(schema);
      const loinc = (code: string) => ({ coding: [{ system: 'http://loinc.org', code }] });
      const resources = [
        { id: 'qty', code: loinc('a'), valueQuantity: { value: 5, unit: 'mg' } },
        { id: 'concept', code: loinc('b'), valueCodeableConcept: loinc('yes') },
        { id: 'nocode', valueQuantity: { value: 7 } },
        {
          id: 'parts',
          code: loinc('c'),
          component: [{ code: loinc('d'), valueQuantity: { value: 1 } }, { valueQuantity: { value: 2 } }],
        },
      ].map((r) => ({
        op: 'create' as const,
        resource: { resourceType: 'Observation', status: 'final', ...r },
      }));
      const queries = [
        'code-value-concept:missing=true',
        'code-value-concept:missing=false',
        'code-value-quantity:missing=true',
        'code-value-quantity:missing=false',
        'component-code-value-quantity:missing=false',
        'combo-code-value-quantity:missing=true',
        'code-value-quantity=a$5',
      ];
      const memory = memoryStorage({ indexer: r4SearchIndexer });
      let storage = postgresStorage({ connectionString, schema });
      try {
        await memory.writeResources('p1', resources);
        await storage.writeResources('p1', resources);
        const ids = async (store: Storage, q: string) => {
          const params = new URLSearchParams(`${q}&_sort=_id`);
          // The memory store tests what its index cannot answer with the predicate.
          const parsed = await parseSearch('Observation', params, {}, allReads());
          return (await store.searchResources('p1', 'Observation', parsed.query)).resources.map((r) => r.id);
        };
        const answers = async (store: Storage) => Promise.all(queries.map((q) => ids(store, q)));
        const expected = [
          ['nocode', 'parts', 'qty'],
          ['concept'],
          ['concept', 'nocode', 'parts'],
          ['qty'],
          ['parts'],
          ['concept', 'nocode'],
          ['qty'],
        ];
        expect(await answers(memory)).toEqual(expected);
        expect(await answers(storage)).toEqual(expected);
        const markers = async () =>
          (
            await admin.query<{ n: number }>(
              `SELECT (SELECT count(*) FROM ${s}.search_tokens WHERE comp = -1)::int
                  + (SELECT count(*) FROM ${s}.search_numbers WHERE comp = -1)::int AS n`,
            )
          ).rows[0]!.n;
        expect(await markers()).toBe(0);
        await storage.close();
        // The version-11 shape: a marker row for an incomplete element; migration 12 rebuilds without.
        await admin.query(
          `INSERT INTO ${s}.search_tokens (seq, key, elem, comp, system, value)
           SELECT r.seq, k.key, 0, -1, 'http://loinc.org', 'a'
             FROM ${s}.resources r JOIN ${s}.search_keys k
               ON k.project_id = r.project_id AND k.resource_type = r.resource_type AND k.param = 'code-value-concept'
            WHERE r.id = 'qty'`,
        );
        await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version = 12`);
        storage = postgresStorage({ connectionString, schema });
        expect(await answers(storage)).toEqual(expected);
        expect(await markers()).toBe(0);
      } finally {
        await memory.close();
        await storage.close();
      }
    });

    it('index rows keep a lone surrogate as U+FFFD, as the body and a search value do', async () => {
      const schema = newSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        const odd = 'a\ud800b';
        await storage.writeResources('p1', [
          {
            op: 'create',
            resource: {
              resourceType: 'Patient',
              id: 'p',
              name: [{ family: odd }],
              identifier: [{ system: 'urn:s', value: odd, type: { coding: [{ system: odd, code: 'x' }] } }],
            },
          },
        ]);
        const ids = async (q: string) => (await search(storage, 'Patient', q)).resources.map((r) => r.id);
        expect(await ids(`identifier=urn:s|${odd}`)).toEqual(['p']);
        expect(await ids('identifier=urn:s|a%EF%BF%BDb')).toEqual(['p']);
        expect(await ids(`family=${odd}`)).toEqual(['p']);
        expect(await ids(`identifier:of-type=${odd}|x|${odd}`)).toEqual(['p']);
      } finally {
        await storage.close();
      }
    });
  });
}
