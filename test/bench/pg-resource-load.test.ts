import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { copyResourcesIn } from '../../bench/pg-resource-load.js';
import { generatePatients, RESOURCES_PER_PATIENT } from '../../bench/dataset.js';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { loadR4Indexer } from '../../src/search/index-resource.js';
import { INDEX_TABLES } from '../../src/storage/postgres/search-tables.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { collectNdjson } from '../../src/testing/contract-helpers.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

const PROJECT = 'p1';
const PATIENTS = 3;
// `meta.lastUpdated` (and the rows derived from it) depends on the database clock of each load.
const LAST_UPDATED = /"lastUpdated":"[^"]*"/g;

if (postgresTestUrl('bench COPY loader (pg-resource-load)')) {
  const url = POSTGRES_URL!;
  const newSchema = schemaFactory(url);
  const admin = new pg.Pool({ connectionString: url, max: 2 });
  const stores: Storage[] = [];
  afterAll(async () => {
    for (const store of stores) await store.close();
    await admin.end();
  });
  const open = async (): Promise<{ schema: string; storage: Storage }> => {
    const schema = newSchema();
    const storage = postgresStorage({ connectionString: url, schema });
    stores.push(storage);
    await storage.ping();
    return { schema, storage };
  };
  const resources = (): FhirResource[] => [...generatePatients(PATIENTS, 7)] as FhirResource[];

  /** Every row of `table`, `seq` replaced by the version's `type/id`, `lu` and the body's instant dropped. */
  const tableRows = async (schema: string, table: string): Promise<string[]> => {
    const s = `"${schema}"`;
    const sql =
      table === 'resources'
        ? `SELECT jsonb_build_object('type', resource_type, 'id', id, 'version', version_id, 'deleted', deleted,
             'superseded', superseded_seq IS NOT NULL, 'project', project_id,
             'body', regexp_replace(body, '"lastUpdated":"[^"]*"', '', 'g'))::text AS row
             FROM ${s}.resources`
        : !(INDEX_TABLES as readonly string[]).includes(table)
          ? `SELECT ((to_jsonb(t) - 'seq') || jsonb_build_object('version', r.resource_type || '/' || r.id))::text AS row
               FROM ${s}.${table} t JOIN ${s}.resources r ON r.seq = t.seq`
          : // An index row's key as the project, type and parameter it numbers (numbers differ by schema).
            `SELECT ((to_jsonb(t) - 'seq' - 'key')
                     || jsonb_build_object('version', r.resource_type || '/' || r.id,
                          'project', k.project_id, 'type', k.resource_type, 'param', k.param))::text AS row
               FROM ${s}.${table} t JOIN ${s}.resources r ON r.seq = t.seq
               JOIN ${s}.search_keys k ON k.key = t.key`;
    const { rows } = await admin.query<{ row: string }>(sql);
    return rows.map((r) => r.row).sort();
  };

  describe('copyResourcesIn', () => {
    it('writes the rows the store writes, and the store searches and exports them', async () => {
      const viaStore = await open();
      const viaCopy = await open();
      // Through the store, a batch per patient (as the benchmark loads).
      let batch: FhirResource[] = [];
      const flush = async (): Promise<void> => {
        await viaStore.storage.writeResources(
          PROJECT,
          batch.map((resource) => ({
            op: 'update' as const,
            resource: resource as FhirResource & { id: string },
          })),
        );
        batch = [];
      };
      for (const resource of resources()) {
        if (resource.resourceType === 'Patient' && batch.length > 0) await flush();
        batch.push(resource);
      }
      await flush();
      const logged: string[] = [];
      const load = await copyResourcesIn({
        connectionString: url,
        schema: viaCopy.schema,
        projectId: PROJECT,
        resources: resources(),
        indexer: await loadR4Indexer(),
        compartment: R4_PATIENT_COMPARTMENT,
        batchSize: 500,
        log: (line) => logged.push(line),
      });
      expect(load.resources).toBe(PATIENTS * RESOURCES_PER_PATIENT);
      expect(load.rows.resources).toBe(load.resources);
      expect(load.rows.search_tokens).toBeGreaterThan(load.resources);
      expect(load.indexMs).toBeGreaterThan(0);
      expect(logged.some((line) => line.includes('rebuilding'))).toBe(true);

      for (const table of ['resources', 'resource_compartments', 'resource_identifiers', ...INDEX_TABLES]) {
        const [a, b] = [await tableRows(viaStore.schema, table), await tableRows(viaCopy.schema, table)];
        expect(b.length, table).toBe(a.length);
        expect(b, table).toEqual(a);
      }
      expect((await tableRows(viaCopy.schema, 'resource_identifiers')).length).toBeGreaterThan(0);
      // Seqs in load order, instants increasing with them, and the body's instant the row's.
      const { rows: order } = await admin.query<{ ok: boolean; n: number }>(
        `SELECT bool_and(lu > prev_lu) AS ok, count(*)::int AS n FROM (
           SELECT lu, lag(lu) OVER (ORDER BY seq) AS prev_lu FROM "${viaCopy.schema}".resources) x
          WHERE prev_lu IS NOT NULL`,
      );
      expect(order[0]).toEqual({ ok: true, n: load.resources - 1 });
      // The dropped indexes are back, the same set as the store made.
      const indexes = async (schema: string): Promise<string[]> =>
        (
          await admin.query<{ d: string }>(
            `SELECT replace(indexdef, $1, 'S') AS d FROM pg_indexes WHERE schemaname = $1 ORDER BY indexname`,
            [schema],
          )
        ).rows.map((r) => r.d);
      expect(await indexes(viaCopy.schema)).toEqual(await indexes(viaStore.schema));

      // The issue-30 searches answer the same on both.
      for (const [type, q] of [
        ['Observation', 'code=http://loinc.org|2345-7'],
        ['Patient', 'name=Wint'],
        ['Observation', 'date=ge2000-01&date=lt2010-01'],
        ['Observation', 'subject:Patient.name=Lemke'],
      ] as const) {
        const query = (await parseSearch(type, new URLSearchParams(q), {}, allReads())).query;
        const [a, b] = await Promise.all(
          [viaStore, viaCopy].map(async ({ storage }) => {
            const page = await storage.searchResources(PROJECT, type, { ...query, count: 1000 });
            return { total: page.total, ids: page.resources.map((r) => r.id).sort() };
          }),
        );
        expect(b, q).toEqual(a);
      }

      // An export (every Observation; a patient's compartment) reads the same resources.
      const patient = (resources()[0] as FhirResource & { id: string }).id;
      for (const options of [
        { resourceType: 'Observation' },
        { resourceType: 'Encounter', patientIds: [patient] },
      ]) {
        const [a, b] = await Promise.all(
          [viaStore, viaCopy].map(async ({ storage }) => {
            const snapshot = await storage.exportSnapshot(PROJECT, {
              ...(options.patientIds ? { patientIds: options.patientIds } : {}),
            });
            try {
              const read = await collectNdjson(
                storage.exportReader.readResources(PROJECT, snapshot, options),
              );
              return read.map((r) => JSON.stringify(r).replace(LAST_UPDATED, '')).sort();
            } finally {
              await storage.releaseSnapshot(snapshot);
            }
          }),
        );
        expect(b!.length).toBeGreaterThan(0);
        expect(b).toEqual(a);
      }

      // The store writes on after the load: a new version of a loaded patient, found by search.
      const loaded = await viaCopy.storage.readResource(PROJECT, 'Patient', patient);
      const [updated] = await viaCopy.storage.writeResources(PROJECT, [
        { op: 'update', resource: { ...loaded, name: [{ family: 'Zyxwv' }] } },
      ]);
      expect(updated!.resource!.meta?.versionId).toBe('2');
      expect(Date.parse(updated!.resource!.meta.lastUpdated)).toBeGreaterThanOrEqual(
        Date.parse(loaded.meta.lastUpdated),
      );
      const query = (await parseSearch('Patient', new URLSearchParams('name=Zyxwv'), {}, allReads())).query;
      const found = await viaCopy.storage.searchResources(PROJECT, 'Patient', query);
      expect(found.resources.map((r) => r.id)).toEqual([patient]);
      const history = await viaCopy.storage.readHistory(PROJECT, { type: 'Patient', id: patient, count: 10 });
      expect(history.entries).toHaveLength(2);
    });

    it('restores the indexes when the load fails', async () => {
      const { schema } = await open();
      const before = await admin.query(`SELECT count(*)::int AS n FROM pg_indexes WHERE schemaname = $1`, [
        schema,
      ]);
      const bad = [{ resourceType: 'Patient' }] as FhirResource[]; // no id: not loadable
      await expect(
        copyResourcesIn({
          connectionString: url,
          schema,
          projectId: PROJECT,
          resources: bad,
          indexer: await loadR4Indexer(),
          compartment: R4_PATIENT_COMPARTMENT,
        }),
      ).rejects.toThrow();
      const after = await admin.query(`SELECT count(*)::int AS n FROM pg_indexes WHERE schemaname = $1`, [
        schema,
      ]);
      expect(after.rows).toEqual(before.rows);
      const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".resources`);
      expect(rows[0]).toEqual({ n: 0 });
    });
  });
}
