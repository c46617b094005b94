import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { INDEX_TABLES } from '../../src/storage/postgres/search-tables.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/*
 * The plans of issue 44's costly searches on PostgreSQL (docs/performance.md, "Costly searches on
 * PostgreSQL"): each test of one version's rows of a parameter (a sort value, `:missing`, the
 * reference rows of `_has`) must be a probe of the `(seq, key)` index, whether or not the planner
 * has statistics of the index tables. With only a `(seq)` index, a planner without them took the
 * lookup index (`key` first) and read every row of the parameter for each candidate: a minute for
 * 16,000 Observations. Plans, not times: a plan that reads a whole parameter per candidate is wrong
 * at any size, and these are what a loaded machine cannot blur.
 */

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Index Cond'?: string;
  Plans?: PlanNode[];
}

/** Every node of a plan tree. */
function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}

/** The columns of the lookup indexes that hold `seq` after others (search-tables.ts). */
const SEQ_AFTER: Record<string, string[]> = {
  search_tokens_key: ['key', 'value', 'system'],
  search_references_key: ['key', 'target_id', 'target_type'],
};

/**
 * What is wrong in a plan: an index scan testing a version's `seq` against a column of an outer row
 * (a per-candidate probe) through an index where `seq` does not follow equalities only (so that the
 * scan reads a whole parameter's entries for each candidate), or a BitmapAnd (which reads a whole
 * key's entries to intersect them with one version's).
 */
function perCandidateScans(plan: PlanNode): string[] {
  return nodesOf(plan).flatMap((node) => {
    if (node['Node Type'] === 'BitmapAnd') return ['BitmapAnd'];
    const cond = node['Index Cond'];
    const name = node['Index Name'];
    if (!cond || !name || !/\bseq = [a-z_]+[0-9]*\.seq\b/.test(cond)) return [];
    if (/^(search_[a-z]+_seq_key|resources_pkey)$/.test(name)) return [];
    const before = SEQ_AFTER[name];
    return before?.every((column) => cond.includes(`(${column} = `)) ? [] : [`${name}: ${cond}`];
  });
}

const PATIENTS = 80;
const OBSERVATIONS = 50;

/** Patients with Observations (some without a value), Encounters and DiagnosticReports citing results. */
function resources(): FhirResource[] {
  const out: FhirResource[] = [];
  for (let p = 0; p < PATIENTS; p++) {
    const subject = { reference: `Patient/p${p}` };
    out.push({ resourceType: 'Patient', id: `p${p}`, name: [{ family: `F${p % 7}` }] });
    out.push({ resourceType: 'Encounter', id: `e${p}`, status: 'finished', subject, class: { code: 'AMB' } });
    for (let o = 0; o < OBSERVATIONS; o++) {
      const i = p * OBSERVATIONS + o;
      out.push({
        resourceType: 'Observation',
        id: `o${i}`,
        status: i % 3 ? 'final' : 'amended',
        category: [{ coding: [{ system: 'urn:cat', code: `c${i % 4}` }] }],
        code: { coding: [{ system: 'urn:c', code: `k${i % 9}`, display: `Code ${i % 9}` }] },
        subject,
        encounter: { reference: `Encounter/e${p}` },
        performer: [{ reference: `Practitioner/d${i % 5}` }],
        effectiveDateTime: `2020-01-${String((i % 28) + 1).padStart(2, '0')}`,
        // Patients p0..p9 have no values: `:missing=false` must leave them out.
        ...(p < 10
          ? {}
          : {
              valueQuantity: { value: i % 100, unit: 'mg', system: 'http://unitsofmeasure.org', code: 'mg' },
            }),
      });
    }
    out.push({
      resourceType: 'DiagnosticReport',
      id: `r${p}`,
      status: p % 2 ? 'final' : 'preliminary',
      code: { coding: [{ system: 'urn:c', code: 'panel' }] },
      subject,
      result: [
        { reference: `Observation/o${p * OBSERVATIONS}` },
        { reference: `Observation/o${p * OBSERVATIONS + 1}` },
      ],
    });
  }
  return out;
}

const SEARCHES: [type: string, query: string][] = [
  ['Observation', '_sort=status,code,date,subject,value-quantity,category,performer,encounter,-_lastUpdated'],
  ['Observation', '_offset=3900&_sort=value-quantity'],
  ['Patient', '_has:Observation:subject:value-quantity:missing=false'],
  ['Patient', '_has:Observation:subject:value-quantity:missing=true'],
  ['Patient', '_has:Observation:subject:_has:DiagnosticReport:result:status=final'],
  ['Patient', '_has:Encounter:subject:_has:Observation:encounter:status=final'],
  ['Observation', 'value-quantity:missing=false&code:not=urn:c|k1'],
];

if (postgresTestUrl('postgresStorage search plans')) {
  const connectionString = POSTGRES_URL!;
  const newSchema = schemaFactory(connectionString);
  const admin = new pg.Pool({ connectionString, max: 1 });
  const schema = newSchema();
  const s = `"${schema}"`;
  let storage: Storage;

  /** The statements a search runs (its SQL and bind values), captured from the store's clients. */
  const statementsOf = async (type: string, query: string) => {
    // Nine sort keys and a deep `_offset` pass the router's default bounds: raised, as a host may.
    const limits = { maxSortKeys: 9, maxOffset: 100_000 };
    const parsed = await parseSearch(type, new URLSearchParams(query), { limits }, allReads());
    const spy = vi.spyOn(pg.Client.prototype, 'query');
    try {
      const page = await storage.searchResources('p1', type, parsed.query);
      const statements = spy.mock.calls
        .map(([text, values]) => ({ text, values: (values ?? []) as unknown[] }))
        .filter((c): c is { text: string; values: unknown[] } => typeof c.text === 'string')
        .filter((c) => !/pg_stat_user_tables|^ANALYZE /.test(c.text));
      return { page, statements };
    } finally {
      spy.mockRestore();
    }
  };

  /** The plan PostgreSQL makes of each statement of a search, and what is wrong in it. */
  const planProblems = async (type: string, query: string): Promise<string[]> => {
    const { statements } = await statementsOf(type, query);
    expect(statements.length).toBeGreaterThan(0);
    const problems: string[] = [];
    for (const { text, values } of statements) {
      const { rows } = await admin.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `EXPLAIN (FORMAT JSON) ${text}`,
        values,
      );
      problems.push(...perCandidateScans(rows[0]!['QUERY PLAN'][0].Plan));
    }
    return problems;
  };

  beforeAll(async () => {
    storage = postgresStorage({ connectionString, schema });
    await storage.ping();
    // No statistics of the index tables until the test gathers them: as on a server where
    // autovacuum is off or has not run since the load.
    for (const table of INDEX_TABLES)
      await admin.query(`ALTER TABLE ${s}.${table} SET (autovacuum_enabled = false)`);
    await storage.writeResources(
      'p1',
      resources().map((resource) => ({
        op: 'update' as const,
        resource: resource as FhirResource & { id: string },
      })),
    );
  });
  afterAll(async () => {
    await storage?.close();
    await admin.end();
  });

  describe('postgresStorage search plans', () => {
    it('probes a version’s rows of a parameter by (seq, key) before the index tables have statistics', async () => {
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_user_tables
          WHERE schemaname = $1 AND relname LIKE 'search\\_%' AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)`,
        [schema],
      );
      expect(rows[0]!.n).toBe(0);
      for (const [type, query] of SEARCHES)
        expect(await planProblems(type, query), `${type}?${query}`).toEqual([]);
    });

    it('and once they have statistics', async () => {
      for (const table of ['resources', 'search_keys', ...INDEX_TABLES])
        await admin.query(`ANALYZE ${s}.${table}`);
      for (const [type, query] of SEARCHES)
        expect(await planProblems(type, query), `${type}?${query}`).toEqual([]);
    });

    it('is migration 16: the (seq) indexes become (seq, key), the rows stay', async () => {
      const other = newSchema();
      const o = `"${other}"`;
      const written = resources().slice(0, 60);
      const first = postgresStorage({ connectionString, schema: other });
      await first.writeResources(
        'p1',
        written.map((resource) => ({
          op: 'update' as const,
          resource: resource as FhirResource & { id: string },
        })),
      );
      await first.close();
      const rows = async () => {
        let n = 0;
        for (const table of INDEX_TABLES)
          n += (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${o}.${table}`)).rows[0]!.n;
        return n;
      };
      const indexes = async () =>
        (
          await admin.query<{ name: string }>(
            `SELECT indexname AS name FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE 'search%seq%' ORDER BY 1`,
            [other],
          )
        ).rows.map((r) => r.name);
      const before = await rows();
      expect(before).toBeGreaterThan(100);
      // The schema as version 15 left it.
      for (const table of INDEX_TABLES) {
        await admin.query(`DROP INDEX ${o}.${table}_seq_key`);
        await admin.query(`CREATE INDEX ${table}_seq ON ${o}.${table} (seq)`);
      }
      await admin.query(`DELETE FROM ${o}.schema_migrations WHERE version = 16`);
      const { rows: state } = await admin.query<{ fingerprint: string }>(
        `SELECT fingerprint FROM ${o}.search_index_state`,
      );
      const second = postgresStorage({ connectionString, schema: other });
      try {
        const page = await second.searchResources('p1', 'Observation', { count: 0 });
        expect(page.total).toBe(written.filter((r) => r.resourceType === 'Observation').length);
        expect(await indexes()).toEqual(INDEX_TABLES.map((table) => `${table}_seq_key`).sort());
        expect(await rows()).toBe(before);
        // No rebuild: the indexer's fingerprint is the one before.
        expect((await admin.query(`SELECT fingerprint FROM ${o}.search_index_state`)).rows).toEqual(state);
      } finally {
        await second.close();
      }
    });

    it('answers them', async () => {
      const totals = async (type: string, query: string) => (await statementsOf(type, query)).page.total;
      const observations = PATIENTS * OBSERVATIONS;
      expect(await totals('Observation', SEARCHES[0]![1])).toBe(observations);
      expect(await totals('Patient', '_has:Observation:subject:value-quantity:missing=false')).toBe(
        PATIENTS - 10,
      );
      expect(await totals('Patient', '_has:Observation:subject:value-quantity:missing=true')).toBe(10);
      expect(
        await totals('Patient', '_has:Observation:subject:_has:DiagnosticReport:result:status=final'),
      ).toBe(PATIENTS / 2);
      expect(await totals('Patient', '_has:Encounter:subject:_has:Observation:encounter:status=final')).toBe(
        PATIENTS,
      );
      const deep = await statementsOf('Observation', `_offset=${observations - 5}&_sort=value-quantity`);
      // Sorted by value, those without one last: the last five are Observations of p0..p9.
      expect(deep.page.resources.map((r) => Number(String(r.id).slice(1)) < 10 * OBSERVATIONS)).toEqual([
        true,
        true,
        true,
        true,
        true,
      ]);
    });
  });
}
