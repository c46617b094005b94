// PostgreSQL export files stored compressed (migration 7): the store's two forms of a file, the
// download route serving them (gzip as stored, identity and Range inflated), and files written
// uncompressed before the migration still served after it.
import { randomBytes, randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { buffer } from 'node:stream/consumers';
import { gunzipSync, inflateRawSync, constants } from 'node:zlib';
import type express from 'express';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import type { PostgresStorageOptions } from '../../src/storage/postgres/postgres-storage.js';
import type { ExportFilesRef, FhirResource, Storage } from '../../src/storage/types.js';
import { createApp, exportManifest, pathOf, token } from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';
import { postgresTestUrl } from '../helpers/postgres.js';

const url = postgresTestUrl('PostgreSQL export files compressed');

/** NDJSON of `n` Observations with non-ASCII text, about 200 bytes a line. */
function ndjson(n: number): string {
  return Array.from(
    { length: n },
    (_, i) =>
      `${JSON.stringify({ resourceType: 'Observation', id: `o${i}`, status: 'final', code: { text: `Blutdruck ${i} — Größe ✓` } })}\n`,
  ).join('');
}

/** A raw HTTP answer: status, headers and the body bytes as sent (never decompressed). */
interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

if (url) {
  const connectionString = url;
  let admin: pg.Pool;
  const schemas: string[] = [];

  beforeAll(() => {
    admin = new pg.Pool({ connectionString, max: 2 });
  });
  afterAll(async () => {
    for (const schema of schemas) await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await admin.end();
  });

  function newSchema(): string {
    const schema = `fpk_gzip_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    return schema;
  }

  function open(schema: string, options: Partial<PostgresStorageOptions> = {}): Storage {
    const storage = postgresStorage({ connectionString, schema, ...options });
    afterTest(() => storage.close());
    return storage;
  }

  /** A running job of project p1 to write files for. */
  async function jobRef(storage: Storage): Promise<ExportFilesRef> {
    const snapshot = await storage.exportSnapshot('p1');
    const job = await storage.createExportJob({
      id: randomUUID(),
      projectId: 'p1',
      ownerId: 'client',
      status: 'in-progress',
      request: 'http://x/$export',
      transactionTime: snapshot.takenAt,
      params: {},
      snapshot,
    });
    return { projectId: 'p1', jobId: job.id };
  }

  async function writeFile(storage: Storage, ref: ExportFilesRef, name: string, text: string): Promise<void> {
    const file = await storage.exportFiles!.sink(ref).create(name);
    // Writes of whole lines, as the export worker's, in uneven groups.
    const lines = text.split(/(?<=\n)/);
    for (let at = 0; at < lines.length; at += 3) await file.write(lines.slice(at, at + 3).join(''));
    await file.commit();
  }

  /** GET (or HEAD) through a real server: the body exactly as sent. */
  async function raw(
    app: express.Express,
    path: string,
    headers: Record<string, string>,
    method = 'GET',
  ): Promise<RawAnswer> {
    const server = http.createServer(app).listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    try {
      const { port } = server.address() as AddressInfo;
      return await new Promise<RawAnswer>((resolve, reject) => {
        http
          .request({ host: '127.0.0.1', port, path, method, headers }, (res) => {
            const parts: Buffer[] = [];
            res.on('data', (c: Buffer) => parts.push(c));
            res.on('end', () =>
              resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }),
            );
            res.on('error', reject);
          })
          .on('error', reject)
          .end();
      });
    } finally {
      server.closeAllConnections();
      server.close();
    }
  }

  describe('PostgreSQL export files compressed', () => {
    it('stores chunks compressed; serves the NDJSON whole or by range, and a gzip form that inflates to it', async () => {
      const schema = newSchema();
      const storage = open(schema, { exportFileChunkBytes: 1000 });
      const ref = await jobRef(storage);
      const text = ndjson(200);
      const bytes = Buffer.from(text);
      await writeFile(storage, ref, 'Observation-1.ndjson', text);
      await writeFile(storage, ref, 'Observation-2.ndjson', '');
      const files = storage.exportFiles!;

      const { rows } = await admin.query<{ encoding: string; chunks: number; stored: string }>(
        `SELECT f.encoding, count(*)::int AS chunks, sum(length(c.data))::text AS stored
           FROM "${schema}".export_files f JOIN "${schema}".export_file_chunks c USING (file_id)
          WHERE f.name = 'Observation-1.ndjson' GROUP BY f.encoding`,
      );
      expect(rows[0]!.encoding).toBe('deflate');
      expect(rows[0]!.chunks).toBeGreaterThan(5);
      expect(Number(rows[0]!.stored)).toBeLessThan(bytes.length / 3);

      expect(await files.size(ref, 'Observation-1.ndjson')).toBe(bytes.length);
      expect(await files.bytes(ref)).toBe(bytes.length);
      expect((await buffer(files.read(ref, 'Observation-1.ndjson'))).equals(bytes)).toBe(true);
      // Ranges within a chunk, across chunk boundaries, to the end.
      for (const [start, end] of [
        [0, 0],
        [999, 1000],
        [150, 4321],
        [bytes.length - 7, bytes.length - 1],
      ] as const) {
        const part = await buffer(files.read(ref, 'Observation-1.ndjson', { start, end }));
        expect(part.equals(bytes.subarray(start, end + 1)), `${start}-${end}`).toBe(true);
      }
      const gz = await buffer(files.readGzip!(ref, 'Observation-1.ndjson'));
      expect(gz.length).toBe(await files.gzipSize!(ref, 'Observation-1.ndjson'));
      expect(gunzipSync(gz).equals(bytes)).toBe(true);
      // An empty file: an empty NDJSON body, a valid empty gzip member.
      expect(await files.size(ref, 'Observation-2.ndjson')).toBe(0);
      const empty = await buffer(files.readGzip!(ref, 'Observation-2.ndjson'));
      expect(empty.length).toBe(await files.gzipSize!(ref, 'Observation-2.ndjson'));
      expect(gunzipSync(empty).length).toBe(0);

      // A reader that stops half-way leaves nothing behind (its read-ahead is dropped quietly).
      const stream = files.read(ref, 'Observation-1.ndjson');
      for await (const piece of stream) {
        expect((piece as Buffer).length).toBeGreaterThan(0);
        break;
      }
      expect(stream.destroyed).toBe(true);
      // A chunk missing in the middle: both forms fail, neither serves a file with a hole.
      await admin.query(
        `DELETE FROM "${schema}".export_file_chunks
          WHERE off = (SELECT min(off) FROM "${schema}".export_file_chunks WHERE off > 5000)`,
      );
      await expect(buffer(files.read(ref, 'Observation-1.ndjson'))).rejects.toMatchObject({
        code: 'ERR_EXPORT_STOPPED',
      });
      await expect(buffer(files.readGzip!(ref, 'Observation-1.ndjson'))).rejects.toMatchObject({
        code: 'ERR_EXPORT_STOPPED',
      });
    });

    it('level 0 stores the bytes as they are and keeps no gzip form', async () => {
      const schema = newSchema();
      const storage = open(schema, { exportFileChunkBytes: 1000, exportFileGzipLevel: 0 });
      const ref = await jobRef(storage);
      const text = ndjson(20);
      await writeFile(storage, ref, 'Observation-1.ndjson', text);
      const { rows } = await admin.query<{ encoding: string }>(
        `SELECT encoding FROM "${schema}".export_files`,
      );
      expect(rows.map((r) => r.encoding)).toEqual(['identity']);
      expect(await storage.exportFiles!.gzipSize!(ref, 'Observation-1.ndjson')).toBeUndefined();
      expect((await buffer(storage.exportFiles!.read(ref, 'Observation-1.ndjson'))).toString()).toBe(text);
      expect(() => postgresStorage({ connectionString, schema, exportFileGzipLevel: 10 })).toThrow(
        /exportFileGzipLevel/,
      );
    });

    it('downloads: gzip as stored with its length to clients that accept it, identity otherwise, Range uncompressed', async () => {
      const schema = newSchema();
      const storage = open(schema, { exportFileChunkBytes: 2000, exportChunkBytes: 2000 });
      const resources: FhirResource[] = Array.from({ length: 150 }, (_, i) => ({
        resourceType: 'Patient',
        id: `p${i}`,
        name: [{ family: `Müller-${i}`, given: ['Zoë'] }],
      }));
      await storage.writeResources(
        'proj-a',
        resources.map((resource) => ({ op: 'update', resource: resource as FhirResource & { id: string } })),
      );
      const { app, router } = createApp(storage);
      afterTest(() => router.close());
      const auth = token('proj-a');
      const manifest = await exportManifest(app, auth, '/$export?_type=Patient');
      const path = pathOf(manifest.output[0]!.url);

      const plain = await raw(app, path, { authorization: auth, 'accept-encoding': 'identity' });
      expect(plain.status).toBe(200);
      expect(plain.headers['content-encoding']).toBeUndefined();
      expect(Number(plain.headers['content-length'])).toBe(plain.body.length);
      const lines = plain.body.toString('utf8').split('\n').filter(Boolean);
      expect(lines.map((l) => (JSON.parse(l) as FhirResource).id).sort()).toEqual(
        resources.map((r) => r.id).sort(),
      );
      // Several chunks: the identity body was inflated chunk by chunk.
      const { rows } = await admin.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM "${schema}".export_file_chunks`,
      );
      expect(rows[0]!.n).toBeGreaterThan(3);

      const gz = await raw(app, path, { authorization: auth, 'accept-encoding': 'gzip, deflate' });
      expect(gz.status).toBe(200);
      expect(gz.headers['content-encoding']).toBe('gzip');
      expect(gz.headers.vary).toMatch(/Accept-Encoding/i);
      expect(Number(gz.headers['content-length'])).toBe(gz.body.length);
      expect(gz.body.length).toBeLessThan(plain.body.length / 2);
      expect(gunzipSync(gz.body).equals(plain.body)).toBe(true);

      const head = await raw(app, path, { authorization: auth, 'accept-encoding': 'gzip' }, 'HEAD');
      expect(head.status).toBe(200);
      expect(head.headers['content-length']).toBe(gz.headers['content-length']);
      expect(head.body.length).toBe(0);

      // A range of the NDJSON across chunk boundaries, even from a client that accepts gzip.
      const part = await raw(app, path, {
        authorization: auth,
        'accept-encoding': 'gzip',
        range: 'bytes=1990-6010',
      });
      expect(part.status).toBe(206);
      expect(part.headers['content-encoding']).toBeUndefined();
      expect(part.headers['content-range']).toBe(`bytes 1990-6010/${plain.body.length}`);
      expect(part.body.equals(plain.body.subarray(1990, 6011))).toBe(true);

      // The download still checks the token.
      const other = await raw(app, path, { authorization: token('proj-b'), 'accept-encoding': 'gzip' });
      expect(other.status).toBe(404);
      const none = await raw(app, path, { 'accept-encoding': 'gzip' });
      expect(none.status).toBe(401);
    });

    it('files written uncompressed before migration 7 are still served, whole, by range and gzip', async () => {
      const schema = newSchema();
      const before = postgresStorage({
        connectionString,
        schema,
        exportFileChunkBytes: 700,
        exportChunkBytes: 700,
      });
      await before.writeResources(
        'proj-a',
        Array.from({ length: 40 }, (_, i) => ({
          op: 'update' as const,
          resource: { resourceType: 'Patient', id: `p${i}`, name: [{ family: `Ñandú ${i}` }] },
        })),
      );
      const first = createApp(before);
      const auth = token('proj-a');
      const manifest = await exportManifest(first.app, auth, '/$export?_type=Patient');
      const path = pathOf(manifest.output[0]!.url);
      const expected = (await raw(first.app, path, { authorization: auth, 'accept-encoding': 'identity' }))
        .body;
      await first.router.close();
      await before.close();

      // Back to the tables of an earlier version: the chunks as the NDJSON bytes themselves, the
      // columns of migration 7 gone and the migration not recorded.
      const s = `"${schema}"`;
      const { rows: chunks } = await admin.query<{ file_id: string; off: string; data: Buffer }>(
        `SELECT file_id, off, data FROM ${s}.export_file_chunks`,
      );
      expect(chunks.length).toBeGreaterThan(2);
      for (const chunk of chunks) {
        const data = inflateRawSync(chunk.data, { finishFlush: constants.Z_SYNC_FLUSH });
        await admin.query(`UPDATE ${s}.export_file_chunks SET data = $3 WHERE file_id = $1 AND off = $2`, [
          chunk.file_id,
          chunk.off,
          data,
        ]);
      }
      await admin.query(
        `ALTER TABLE ${s}.export_files DROP COLUMN encoding, DROP COLUMN crc32, DROP COLUMN stored_size`,
      );
      await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version = 7`);

      const after = open(schema);
      const { app, router } = createApp(after);
      afterTest(() => router.close());
      const plain = await raw(app, path, { authorization: auth, 'accept-encoding': 'identity' });
      expect(plain.status).toBe(200);
      expect(plain.body.equals(expected)).toBe(true);
      const gz = await raw(app, path, { authorization: auth, 'accept-encoding': 'gzip' });
      expect(gz.headers['content-encoding']).toBe('gzip');
      // Compressed on the fly: no length known in advance.
      expect(gz.headers['content-length']).toBeUndefined();
      expect(gunzipSync(gz.body).equals(expected)).toBe(true);
      const part = await raw(app, path, { authorization: auth, range: 'bytes=690-1500' });
      expect(part.status).toBe(206);
      expect(part.body.equals(expected.subarray(690, 1501))).toBe(true);
      const { rows } = await admin.query<{ encoding: string }>(
        `SELECT DISTINCT encoding FROM ${s}.export_files`,
      );
      expect(rows.map((r) => r.encoding)).toEqual(['identity']);
      const { rows: versions } = await admin.query<{ version: number }>(
        `SELECT version FROM ${s}.schema_migrations WHERE version = 7`,
      );
      expect(versions).toHaveLength(1);
    });
  });
}
