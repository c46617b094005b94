import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { memoryStorage, r4SearchIndexer } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/*
 * PostgreSQL keeps no index rows for the parameters the R4 indexer derives from others
 * (`combo-code` = `code` | `component-code`, `code-value-concept` = `code` and `value-concept` on
 * the Observation itself, `patient` = `subject` restricted to Patient, …) and answers them from
 * their parts, as the memory store answers them from the resources.
 */

/** The R4 Observation parameters derived from others (src/search/derived-parameters.ts). */
const DERIVED = [
  'combo-code',
  'combo-value-quantity',
  'combo-value-concept',
  'combo-data-absent-reason',
  'code-value-concept',
  'combo-code-value-concept',
  'code-value-quantity',
  'combo-code-value-quantity',
];

const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;

if (postgresTestUrl('postgresStorage derived search parameters')) {
  const connectionString = POSTGRES_URL!;
  const newSchema = schemaFactory(connectionString);
  const admin = new pg.Pool({ connectionString, max: 1 });
  afterAll(() => admin.end());

  describe('postgresStorage derived search parameters', () => {
    it('writes no rows for them, answers them from their parts, and migrations 13 and 15 drop the old rows', async () => {
      const schema = newSchema();
      const s = quote(schema);
      const loinc = (code: string, text?: string) => ({
        coding: [{ system: 'http://loinc.org', code }],
        ...(text ? { text } : {}),
      });
      const resources = [
        {
          id: 'qty',
          code: loinc('a'),
          valueQuantity: { value: 5, unit: 'mg' },
          subject: { reference: 'Patient/p1' },
        },
        {
          id: 'concept',
          code: loinc('b'),
          valueCodeableConcept: loinc('yes', 'Yes'),
          subject: { reference: 'Group/g1' },
        },
        {
          id: 'nocode',
          valueQuantity: { value: 7 },
          subject: { type: 'Patient', identifier: { system: 'urn:s', value: 'x' } },
        },
        {
          id: 'parts',
          subject: { reference: 'http://other.org/fhir/Patient/p2' },
          code: loinc('c'),
          component: [
            { code: loinc('d'), valueQuantity: { value: 1 } },
            { code: loinc('e'), valueCodeableConcept: loinc('yes') },
            { valueQuantity: { value: 9 } },
          ],
        },
        { id: 'textonly', code: { text: 'Blood pressure' }, component: [{ code: loinc('a') }] },
        { id: 'none' },
      ].map((r) => ({
        op: 'create' as const,
        resource: { resourceType: 'Observation', status: 'final', ...r },
      }));
      const queries = [
        'combo-code=a',
        'combo-code=http://loinc.org|d,b',
        'combo-code:not=a',
        'combo-code:missing=true',
        'combo-code:missing=false',
        'combo-code:text=blood',
        'combo-code=a&combo-code=d',
        'combo-value-quantity=gt4',
        'combo-value-quantity=le1',
        'combo-value-quantity:missing=true',
        'combo-value-concept=yes',
        'code-value-concept=b$yes',
        'code-value-concept=e$yes',
        'code-value-concept:missing=false',
        'combo-code-value-concept=e$yes',
        'combo-code-value-concept=b$yes,c$yes',
        'combo-code-value-concept:missing=true',
        'status=final&combo-code=c',
        'combo-code-value-quantity=a$5',
        'combo-code-value-quantity=d$1,c$9',
        'combo-code-value-quantity=http://loinc.org|d$le1|http://unitsofmeasure.org|mg',
        'combo-code-value-quantity:missing=true',
        'combo-code-value-quantity:missing=false',
        'code-value-quantity=a$5',
        'code-value-quantity=http://loinc.org|a$gt4|http://unitsofmeasure.org|mg',
        'code-value-quantity=d$1',
        'code-value-quantity:missing=true',
        'code-value-quantity:missing=false',
        // `patient` is `subject` restricted to Patient.
        'patient=p1',
        'patient=Patient/p2',
        'patient=http://other.org/fhir/Patient/p2',
        'patient=g1',
        'subject=Group/g1',
        'patient:missing=true',
        'patient:missing=false',
        'patient:identifier=urn:s|x',
      ];
      const memory = memoryStorage({ indexer: r4SearchIndexer });
      let storage = postgresStorage({ connectionString, schema });
      try {
        const patients = [
          { id: 'p1', name: [{ family: 'Smith' }] },
          { id: 'p2', name: [{ family: 'Jones' }] },
        ].map((r) => ({ op: 'create' as const, resource: { resourceType: 'Patient', ...r } }));
        for (const store of [memory, storage]) {
          await store.writeResources('p1', resources);
          await store.writeResources('p1', patients);
        }
        const ids = async (store: Storage, q: string, sort = '_id') => {
          const params = new URLSearchParams(`${q}&_sort=${sort}`);
          // The memory store tests what its index cannot answer with the predicate.
          const parsed = await parseSearch('Observation', params, {}, allReads());
          return (await store.searchResources('p1', 'Observation', parsed.query)).resources.map((r) => r.id);
        };
        const answers = async (store: Storage) => [
          ...(await Promise.all(queries.map((q) => ids(store, q)))),
          // Sorted by a union: the lowest (highest) value of either part.
          await ids(store, 'status=final', 'combo-code,_id'),
          await ids(store, 'status=final', '-combo-code,_id'),
          await ids(store, 'status=final', 'combo-value-quantity,_id'),
          await ids(store, 'status=final', '-patient,_id'),
        ];
        const expected = await answers(memory);
        expect(expected.slice(0, 3)).toEqual([
          ['qty', 'textonly'],
          ['concept', 'parts'],
          ['concept', 'nocode', 'none', 'parts'],
        ]);
        expect(await answers(storage)).toEqual(expected);
        expect(expected.slice(queries.indexOf('patient=p1'), queries.indexOf('patient=p1') + 4)).toEqual([
          ['qty'],
          ['parts'],
          ['parts'],
          [],
        ]);
        // Chains through a restriction, both ways (the memory store leaves chains to the FHIR layer).
        const pgIds = async (type: string, q: string) => {
          const parsed = await parseSearch(type, new URLSearchParams(q), {}, allReads());
          return (await storage.searchResources('p1', type, parsed.query)).resources.map((r) => r.id).sort();
        };
        expect(await pgIds('Observation', 'patient.name=smith')).toEqual(['qty']);
        for (const name of ['smith', 'jones', 'smith,jones'])
          expect(await pgIds('Observation', `patient:Patient.name=${name}`)).toEqual(
            await pgIds('Observation', `subject:Patient.name=${name}`),
          );
        expect(await pgIds('Patient', '_has:Observation:patient:code=a')).toEqual(['p1']);
        expect(await pgIds('Patient', '_has:Observation:patient:code=b,c')).toEqual(['p2']);
        const { rows: referenceRows } = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${s}.search_references t JOIN ${s}.search_keys k USING (key)
            WHERE k.param = 'patient'`,
        );
        expect(referenceRows[0]!.n).toBe(0);
        const derivedRows = async () =>
          (
            await admin.query<{ n: number }>(
              `SELECT (SELECT count(*) FROM ${s}.search_tokens t JOIN ${s}.search_keys k USING (key)
                        WHERE k.param = ANY($1))::int
                    + (SELECT count(*) FROM ${s}.search_numbers t JOIN ${s}.search_keys k USING (key)
                        WHERE k.param = ANY($1))::int AS n`,
              [DERIVED],
            )
          ).rows[0]!.n;
        expect(await derivedRows()).toBe(0);
        // The parts and the stored composites keep theirs.
        const { rows } = await admin.query<{ param: string }>(
          `SELECT DISTINCT k.param FROM ${s}.search_tokens t JOIN ${s}.search_keys k USING (key) ORDER BY param`,
        );
        expect(rows.map((r) => r.param)).toEqual(
          expect.arrayContaining(['code', 'component-code', 'component-code-value-concept', 'value-concept']),
        );
        // The shapes before migration 13 (rows of `combo-code`) and 15 (of `code-value-quantity`):
        // the migration rebuilds the index without them.
        for (const [version, param] of [
          [13, 'combo-code'],
          [15, 'code-value-quantity'],
        ] as const) {
          await storage.close();
          await admin.query(
            `INSERT INTO ${s}.search_keys (project_id, resource_type, param)
             VALUES ('p1', 'Observation', $1) ON CONFLICT DO NOTHING`,
            [param],
          );
          await admin.query(
            `INSERT INTO ${s}.search_tokens (seq, key, system, value)
             SELECT r.seq, k.key, 'http://loinc.org', 'zzz'
               FROM ${s}.resources r JOIN ${s}.search_keys k
                 ON k.project_id = r.project_id AND k.resource_type = r.resource_type AND k.param = $1
              WHERE r.id = 'qty'`,
            [param],
          );
          expect(await derivedRows()).toBe(1);
          await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version = $1`, [version]);
          storage = postgresStorage({ connectionString, schema });
          expect(await answers(storage)).toEqual(expected);
          expect(await derivedRows()).toBe(0);
        }
      } finally {
        await memory.close();
        await storage.close();
      }
    });
  });
}
