import { identifierFilter, typeSearch } from '../../src/storage/search-request.js';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ExportPool } from '../../src/bulk/export-pool.js';
import { openPostgresExportReader } from '../../src/storage/postgres/export-reader.js';
import { postgresStorage } from '../../src/postgres.js';
import { SCHEMA_VERSION } from '../../src/storage/postgres/schema.js';
import type { ExportReader, ExportSnapshot, IdentifierToken, Storage } from '../../src/storage/types.js';
import { collect, collectNdjson, runStorageContract } from '../../src/testing/storage-contract.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { sleep } from '../helpers/sleep.js';
import { tempDir } from '../helpers/temp-dir.js';

const url = postgresTestUrl('postgresStorage');

function quote(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

if (url) {
  const connectionString = url;
  let admin: pg.Pool;
  const schemas: string[] = [];

  /** A fresh schema name, dropped when the file's tests end. */
  function freshSchema(): string {
    const schema = `fpk_test_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    return schema;
  }

  async function dropSchema(schema: string): Promise<void> {
    await admin.query(`DROP SCHEMA IF EXISTS ${quote(schema)} CASCADE`);
  }

  beforeAll(() => {
    admin = new pg.Pool({ connectionString, max: 2 });
  });
  afterAll(async () => {
    for (const schema of schemas) await dropSchema(schema);
    await admin.end();
  });

  runStorageContract('postgres', () => {
    const schema = freshSchema();
    const storage = postgresStorage({ connectionString, schema });
    return Promise.resolve({
      storage,
      cleanup: async () => {
        await storage.close();
        await dropSchema(schema);
      },
    });
  });

  describe('postgresStorage', () => {
    it('two instances over one database see each other’s writes and keep the rules together', async () => {
      const schema = freshSchema();
      const a = postgresStorage({ connectionString, schema });
      const b = postgresStorage({ connectionString, schema });
      try {
        const created = await a.createResource('p1', { resourceType: 'Patient', id: 'x', active: true });
        expect(await b.readResource('p1', 'Patient', 'x')).toEqual(created);
        await b.createUser('p1', {
          projectId: 'p1',
          userName: 'Alice',
          userType: 'Practitioner',
          profileId: 'pr',
          active: true,
          data: {},
        });
        await expect(
          a.createUser('p1', {
            projectId: 'p1',
            userName: 'alice',
            userType: 'Practitioner',
            profileId: 'pr2',
            active: true,
            data: {},
          }),
        ).rejects.toMatchObject({ code: 'ERR_STORAGE_CONFLICT', attribute: 'userName' });
        // Interleaved writes from both instances: distinct, increasing lastUpdated; no lost update.
        const writes = await Promise.all(
          Array.from({ length: 20 }, (_, i) =>
            (i % 2 ? a : b).createResource('p1', { resourceType: 'Basic', id: `b${i}` }),
          ),
        );
        expect(new Set(writes.map((w) => w.meta.lastUpdated)).size).toBe(20);
        await b.updateResource('p1', { resourceType: 'Patient', id: 'x', active: false });
        await expect(
          a.updateResource('p1', { resourceType: 'Patient', id: 'x' }, { ifMatch: created.meta.versionId }),
        ).rejects.toMatchObject({ code: 'ERR_STORAGE_PRECONDITION_FAILED' });
        expect(await a.useOnce('jti', Date.now() + 60_000)).toBe(true);
        expect(await b.useOnce('jti', Date.now() + 60_000)).toBe(false);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('migration 2 indexes the identifiers of resources written before it', async () => {
      const schema = freshSchema();
      let storage = postgresStorage({ connectionString, schema });
      try {
        const writes = [];
        for (let i = 0; i < 2500; i++) {
          writes.push({
            op: 'create' as const,
            resource: {
              resourceType: 'Observation',
              id: `o${i}`,
              identifier: [{ system: 'urn:lab', value: `${i}` }],
            },
          });
        }
        await storage.writeResources('p1', writes);
        await storage.updateResource('p1', {
          resourceType: 'Observation',
          id: 'o1',
          identifier: [{ system: 'urn:lab', value: 'new' }],
        });
        await storage.deleteResource('p1', 'Observation', 'o2');
        await storage.createResource('p2', { resourceType: 'Patient', id: 'x', identifier: { value: '3' } });
        await storage.close();
        // Back to a schema at version 1: the table exists (created empty) but nothing is indexed.
        const s = quote(schema);
        await admin.query(`DELETE FROM ${s}.resource_identifiers`);
        await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version = 2`);
        storage = postgresStorage({ connectionString, schema });
        const ids = async (projectId: string, type: string, token: IdentifierToken) =>
          (
            await storage.searchResources(projectId, type, {
              search: typeSearch(type, [identifierFilter([token])]),
              sort: '_id',
            })
          ).resources.map((r) => r.id);
        expect(await ids('p1', 'Observation', { system: 'urn:lab', value: '1' })).toEqual([]);
        expect(await ids('p1', 'Observation', { system: 'urn:lab', value: 'new' })).toEqual(['o1']);
        expect(await ids('p1', 'Observation', { value: '2' })).toEqual([]);
        expect(await ids('p1', 'Observation', { value: '2499' })).toEqual(['o2499']);
        expect(await ids('p2', 'Patient', { value: '3' })).toEqual(['x']);
        expect(
          (
            await storage.searchResources('p1', 'Observation', {
              search: typeSearch('Observation', [identifierFilter([{ system: 'urn:lab' }])]),
            })
          ).total,
        ).toBe(2499);
        const { rows } = await admin.query<{ version: number }>(
          `SELECT version FROM ${s}.schema_migrations ORDER BY version`,
        );
        expect(rows.map((r) => r.version)).toEqual(Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1));
        // Only current, live versions are indexed.
        const { rows: count } = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${s}.resource_identifiers WHERE key LIKE 't%'`,
        );
        expect(count[0]!.n).toBe(2499);

        // The search is an index lookup, not a scan of the resources (EXPLAIN of the statement the
        // store runs, with its parameters, on the analyzed tables).
        await admin.query(`ANALYZE ${s}.resources`);
        await admin.query(`ANALYZE ${s}.resource_identifiers`);
        const query = vi.spyOn(pg.Client.prototype, 'query');
        let statement: { text: string; values: unknown[] } | undefined;
        try {
          expect(await ids('p1', 'Observation', { system: 'urn:lab', value: '77' })).toEqual(['o77']);
          for (const [arg, values] of query.mock.calls as unknown as [unknown, unknown[]][]) {
            const config =
              typeof arg === 'string' ? { text: arg, values } : (arg as { text: string; values: unknown[] });
            if (config.text.includes('resource_identifiers'))
              statement = { text: config.text, values: config.values };
          }
        } finally {
          query.mockRestore();
        }
        expect(statement).toBeDefined();
        const { rows: plan } = await admin.query<{ 'QUERY PLAN': unknown }>(
          `EXPLAIN (FORMAT JSON) ${statement!.text}`,
          statement!.values,
        );
        const nodes: { 'Node Type': string; 'Relation Name'?: string; 'Index Name'?: string }[] = [];
        const walk = (node: Record<string, unknown>) => {
          nodes.push(node as (typeof nodes)[number]);
          for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
        };
        walk((plan[0]!['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0]!.Plan);
        expect(
          nodes.some((n) => n['Relation Name'] === 'resource_identifiers' && /Index/.test(n['Node Type'])),
        ).toBe(true);
        expect(nodes.filter((n) => n['Node Type'] === 'Seq Scan')).toEqual([]);
      } finally {
        await storage.close();
      }
    });

    it('a worker-side reader opened from the descriptor reads the snapshot', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema, exportChunkBytes: 64 });
      let reader: ExportReader | undefined;
      try {
        for (let i = 0; i < 5; i++) {
          await storage.createResource('p1', { resourceType: 'Patient', id: `p${i}` });
        }
        await storage.deleteResource('p1', 'Patient', 'p4');
        const snapshot = JSON.parse(JSON.stringify(await storage.exportSnapshot('p1'))) as ExportSnapshot;
        await storage.createResource('p1', { resourceType: 'Patient', id: 'late' });
        await storage.updateResource('p1', { resourceType: 'Patient', id: 'p0', active: false });
        const descriptor = storage.descriptor!;
        expect(descriptor.exportName).toBe('openPostgresExportReader');
        expect(descriptor.options).toMatchObject({ connectionString, schema });
        const module = (await import(descriptor.module)) as Record<string, unknown>;
        const open = module[descriptor.exportName] as typeof openPostgresExportReader;
        reader = open(descriptor.options as unknown as Parameters<typeof openPostgresExportReader>[0]);
        const chunks = await collect(reader.readResources('p1', snapshot, { resourceType: 'Patient' }));
        // Small chunks: several of them, each whole lines.
        expect(chunks.length).toBeGreaterThan(1);
        const rows = await collectNdjson(
          (async function* () {
            yield* chunks;
            await Promise.resolve();
          })(),
        );
        expect(rows.map((r) => r.id)).toEqual(['p0', 'p1', 'p2', 'p3']);
        expect(rows[0]!.active).toBeUndefined();
        const deleted = await collect(reader.readDeleted('p1', snapshot, { resourceType: 'Patient' }));
        expect(deleted.map((t) => t.id)).toEqual(['p4']);
        // Stopping early releases the cursor's connection.
        for await (const chunk of reader.readResources('p1', snapshot, { resourceType: 'Patient' })) {
          expect(chunk.count).toBeGreaterThan(0);
          break;
        }
        expect(
          (await collectNdjson(reader.readResources('p1', snapshot, { resourceType: 'Patient' }))).length,
        ).toBe(4);
      } finally {
        await reader?.close();
        await storage.close();
      }
    });

    it('exports in a worker thread that reopens the store from its descriptor', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      const pool = new ExportPool({ maxThreads: 1 });
      const outputDir = tempDir('fpk-pg-export-');
      try {
        await storage.createResource('p1', { resourceType: 'Patient', id: 'pa' });
        await storage.createResource('p1', {
          resourceType: 'Observation',
          id: 'o1',
          subject: { reference: 'Patient/pa' },
        });
        await storage.createResource('p2', { resourceType: 'Patient', id: 'other' });
        const snapshot = await storage.exportSnapshot('p1');
        await storage.createResource('p1', { resourceType: 'Patient', id: 'late' });
        const result = await pool.run({
          jobId: 'job-1',
          projectId: 'p1',
          params: { level: 'system', outputFormat: 'application/fhir+ndjson', lenient: false },
          types: ['Patient', 'Observation'],
          snapshot,
          descriptor: storage.descriptor!,
          outputDir,
          maxFileSize: 1 << 20,
          issues: [],
        });
        const ids = (type: string) =>
          result.output
            .filter((o) => o.type === type)
            .flatMap((o) => fs.readFileSync(path.join(outputDir, o.file), 'utf8').trim().split('\n'))
            .map((line) => (JSON.parse(line) as { id: string }).id);
        expect(ids('Patient')).toEqual(['pa']);
        expect(ids('Observation')).toEqual(['o1']);
      } finally {
        await pool.close();
        await storage.close();
        fs.rmSync(outputDir, { recursive: true, force: true });
      }
    });

    it('takenAt is after every version in the snapshot and before every later one', async () => {
      const schema = freshSchema();
      const a = postgresStorage({ connectionString, schema });
      const b = postgresStorage({ connectionString, schema });
      try {
        const before = await a.createResource('p1', { resourceType: 'Patient' });
        const snapshot = await b.exportSnapshot('p1');
        const after = await a.createResource('p1', { resourceType: 'Patient' });
        expect(before.meta.lastUpdated <= snapshot.takenAt).toBe(true);
        expect(after.meta.lastUpdated > snapshot.takenAt).toBe(true);
        // An export with `_since` = takenAt (even cut to milliseconds) finds the later write.
        const since = Date.parse(snapshot.takenAt);
        const later = await b.exportSnapshot('p1');
        const rows = await collectNdjson(
          b.exportReader.readResources('p1', later, { resourceType: 'Patient', since }),
        );
        expect(rows.map((r) => r.id)).toContain(after.id);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('serializes read-modify-write transactions on one user (reads in a transaction lock the row)', async () => {
      const schema = freshSchema();
      const a = postgresStorage({ connectionString, schema });
      const b = postgresStorage({ connectionString, schema });
      try {
        const user = await a.createUser('p1', {
          projectId: 'p1',
          userName: 'counter',
          userType: 'Patient',
          profileId: 'pa',
          active: true,
          data: { n: 0 },
        });
        await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            (i % 2 ? a : b).transaction(async (tx) => {
              const current = await tx.readUser('p1', user.id);
              await tx.updateUser(
                'p1',
                user.id,
                { data: { n: (current.data.n as number) + 1 } },
                { ifVersion: current.version },
              );
            }),
          ),
        );
        const final = await a.readUser('p1', user.id);
        expect(final.data.n).toBe(8);
        expect(final.version).toBe(9);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('conditional creates in concurrent transactions do not race (resource reads hold back writers)', async () => {
      const schema = freshSchema();
      const a = postgresStorage({ connectionString, schema });
      const b = postgresStorage({ connectionString, schema });
      try {
        const created = await Promise.all(
          Array.from({ length: 6 }, (_, i) =>
            (i % 2 ? a : b).transaction(async (tx) => {
              const found = await tx.searchResources('p1', 'Patient', {
                where: (r) => r.gender === 'other',
              });
              if (found.resources.length > 0) return false;
              await tx.createResource('p1', { resourceType: 'Patient', gender: 'other' });
              return true;
            }),
          ),
        );
        expect(created.filter(Boolean)).toHaveLength(1);
        expect((await a.searchResources('p1', 'Patient')).total).toBe(1);
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('a transaction holds back resource writers of its project only', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        let release!: () => void;
        const gate = new Promise<void>((resolve) => (release = resolve));
        let inside!: () => void;
        const entered = new Promise<void>((resolve) => (inside = resolve));
        const tx = storage.transaction(async (t) => {
          await t.createResource('p1', { resourceType: 'Patient', id: 'in-tx' });
          inside();
          await gate;
        });
        await entered;
        // Another project writes at once; the same project waits for the transaction.
        await storage.createResource('p2', { resourceType: 'Patient', id: 'other' });
        let sameDone = false;
        const same = storage.createResource('p1', { resourceType: 'Patient', id: 'after' }).then((r) => {
          sameDone = true;
          return r;
        });
        await sleep(100); // a while in which the same project's write must stay blocked
        expect(sameDone).toBe(false);
        release();
        await tx;
        const after = await same;
        const inTx = await storage.readResource('p1', 'Patient', 'in-tx');
        expect(after.meta.lastUpdated > inTx.meta.lastUpdated).toBe(true);
      } finally {
        await storage.close();
      }
    });

    it('uses a caller-owned pool without ending it and has no descriptor then', async () => {
      const schema = freshSchema();
      const pool = new pg.Pool({ connectionString, max: 3 });
      const storage: Storage = postgresStorage({ pool, schema });
      try {
        expect(storage.descriptor).toBeUndefined();
        await storage.createProject({ id: 'p1', name: 'P', strictMode: false });
        await storage.close();
        const { rows } = await pool.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${quote(schema)}.projects`,
        );
        expect(rows[0]!.n).toBe(1);
      } finally {
        await pool.end();
      }
    });

    it('fails fast on a write through the store inside its own transaction', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        await expect(
          storage.transaction(async (tx) => {
            await tx.createResource('p1', { resourceType: 'Patient', id: 'a' });
            await storage.createResource('p1', { resourceType: 'Patient', id: 'b' });
          }),
        ).rejects.toMatchObject({ code: 'ERR_STORAGE_IN_TRANSACTION' });
        expect((await storage.searchResources('p1', 'Patient')).total).toBe(0);
      } finally {
        await storage.close();
      }
    });

    it('refuses values PostgreSQL cannot store with InvalidRecordError, and the transaction goes on', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        await storage.transaction(async (tx) => {
          await expect(
            tx.createUser('p1', {
              projectId: 'p1',
              userName: 'a\u0000b',
              userType: 'Patient',
              profileId: 'pa',
              active: true,
              data: {},
            }),
          ).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
          // Inside record data, a NUL is fine.
          const user = await tx.createUser('p1', {
            projectId: 'p1',
            userName: 'nul',
            userType: 'Patient',
            profileId: 'pa',
            active: true,
            data: { displayName: 'a\u0000b' },
          });
          expect((await tx.readUser('p1', user.id)).data.displayName).toBe('a\u0000b');
          await expect(
            tx.createResource('p1', { resourceType: 'Patient', id: 'a\u0000b' }),
          ).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
          await expect(tx.readUser('p1', 'a\u0000b')).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
          await tx.createResource('p1', { resourceType: 'Patient', id: 'ok', text: 'a\u0000b' });
        });
        expect((await storage.readResource('p1', 'Patient', 'ok')).text).toBe('a\u0000b');
      } finally {
        await storage.close();
      }
    });

    it('a transaction aborted by a failed statement does not pretend to commit', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        const failed = storage.transaction(async (tx) => {
          await tx.createResource('p1', { resourceType: 'Patient', id: 'kept-out' });
          // Too long for the userName index: the statement fails and PostgreSQL aborts the transaction.
          await expect(
            tx.createUser('p1', {
              projectId: 'p1',
              userName: randomBytes(6000).toString('base64'),
              userType: 'Patient',
              profileId: 'pa',
              active: true,
              data: {},
            }),
          ).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
          await expect(tx.readProject('p1')).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
        });
        await expect(failed).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
        await expect(storage.readResource('p1', 'Patient', 'kept-out')).rejects.toMatchObject({
          code: 'ERR_STORAGE_NOT_FOUND',
        });
      } finally {
        await storage.close();
      }
    });

    it('reports an unreachable database on the first call, and still closes', async () => {
      const storage = postgresStorage({ connectionString: 'postgres://postgres@127.0.0.1:1/none' });
      await expect(storage.readProject('p1')).rejects.toThrow();
      await expect(storage.readProject('p1')).rejects.toThrow();
      await storage.close();
      await expect(storage.readProject('p1')).rejects.toMatchObject({ code: 'ERR_STORAGE_CLOSED' });
    });

    it('answers invalid records with a rejected promise, never a synchronous throw', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      try {
        const calls = [
          () => storage.createProject({ id: '', name: 'x', strictMode: false }),
          () =>
            storage.createUser('p1', {
              projectId: 'p1',
              userName: '',
              userType: 'Patient',
              profileId: 'pa',
              active: true,
              data: {},
            }),
          () => storage.createMembership('p1', { projectId: 'p1', id: '', admin: false }),
          () =>
            storage.createClient({
              id: '',
              projectId: 'p1',
              name: 'c',
              scope: '',
              admin: false,
              superAdmin: false,
            }),
        ];
        for (const call of calls) {
          let promise: Promise<unknown> | undefined;
          expect(() => (promise = call())).not.toThrow();
          await expect(promise).rejects.toMatchObject({ code: 'ERR_STORAGE_INVALID' });
        }
      } finally {
        await storage.close();
      }
    });

    it('rejects bad options early', () => {
      expect(() => postgresStorage({ connectionString, schema: '' })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
      );
      expect(() => postgresStorage({ connectionString, exportChunkBytes: 0 })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
      );
    });
  });
}
