import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { openPostgresExportFiles } from '../../src/storage/postgres/export-files.js';
import { StorageUnavailableError } from '../../src/storage/errors.js';
import { LineChunks } from '../../src/storage/postgres/line-chunks.js';
import type { NdjsonChunk } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { collect } from '../../src/testing/storage-contract.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/** Feeds `text` to a LineChunks cut at `cuts`, copying each chunk as the consumer would write it. */
function pack(text: string, cuts: number[], size: number, reuse: boolean): { data: string; count: number }[] {
  const bytes = Buffer.from(text);
  const lines = new LineChunks(size, reuse);
  const out: { data: string; count: number }[] = [];
  const take = (chunk: NdjsonChunk) =>
    out.push({ data: Buffer.from(chunk.data).toString(), count: chunk.count });
  let from = 0;
  for (const cut of [...cuts, bytes.length]) {
    for (const chunk of lines.push(bytes.subarray(from, cut))) take(chunk);
    from = cut;
  }
  const last = lines.end();
  if (last) take(last);
  return out;
}

describe('LineChunks (COPY output to NDJSON chunks)', () => {
  const lines = Array.from({ length: 200 }, (_, i) => `{"i":${i},"s":"${'é'.repeat(i % 37)}\\\\n"}`);
  const text = lines.map((l) => `${l}\n`).join('');

  for (const reuse of [false, true]) {
    it(`yields whole lines within the size, whatever the cuts (reuse ${reuse})`, () => {
      for (const size of [64, 100, 1000, 1 << 20]) {
        const cuts = [1, 2, 3, 17, 64, 65, 500, 1501, 2222, 4000, 4001, 4002].filter((c) => c < text.length);
        const chunks = pack(text, cuts, size, reuse);
        expect(chunks.map((c) => c.data).join('')).toBe(text);
        expect(chunks.reduce((n, c) => n + c.count, 0)).toBe(lines.length);
        for (const chunk of chunks) {
          expect(chunk.data.endsWith('\n')).toBe(true);
          expect(chunk.count).toBe(chunk.data.split('\n').length - 1);
          // Only a single line longer than the size may exceed it.
          if (Buffer.byteLength(chunk.data) > size) expect(chunk.count).toBe(1);
        }
      }
    });
  }

  it('grows for a line longer than a chunk, then goes back to the chunk size', () => {
    const long = `{"x":"${'a'.repeat(5000)}"}`;
    const chunks = pack(`{"a":1}\n${long}\n{"b":2}\n{"c":3}\n`, [3, 2000, 5010], 256, true);
    expect(chunks.map((c) => c.count)).toEqual([1, 1, 2]);
    expect(chunks[1]!.data).toBe(`${long}\n`);
  });

  it('with reuse, a chunk stays intact until the next one is produced', () => {
    const lines = new LineChunks(16, true);
    const seen: string[] = [];
    for (const chunk of lines.push(Buffer.from('aaaaaa\nbbbbbb\ncccccc\ndddddd\neeeeee\n'))) {
      seen.push(Buffer.from(chunk.data).toString());
    }
    expect(seen).toEqual(['aaaaaa\nbbbbbb\n', 'cccccc\ndddddd\n']);
    expect(Buffer.from(lines.end()!.data).toString()).toBe('eeeeee\n');
  });
});

if (postgresTestUrl('PostgreSQL export reads through COPY')) {
  const connectionString = POSTGRES_URL!;
  const freshSchema = schemaFactory(connectionString);

  describe('PostgreSQL export reads through COPY', () => {
    it('writes each stored body byte for byte (escapes, backslashes, non-ASCII), one per line', async () => {
      const storage = postgresStorage({ connectionString, schema: freshSchema(), exportChunkBytes: 200 });
      afterTest(() => storage.close());
      const texts = [
        'tab\there',
        'back\\slash "quoted"',
        'line\nbreak\r\n',
        'ünïcødé ✓ \u2028 😀',
        '\u0001\u0002',
      ];
      for (const [i, text] of texts.entries()) {
        await storage.createResource('p1', { resourceType: 'Basic', id: `b${i}`, code: { text } });
      }
      const snapshot = await storage.exportSnapshot('p1');
      const chunks = await collect(
        storage.exportReader.readResources('p1', snapshot, { resourceType: 'Basic' }),
      );
      const ndjson = chunks.map((c) => Buffer.from(c.data).toString()).join('');
      const stored = await Promise.all(texts.map((_, i) => storage.readResource('p1', 'Basic', `b${i}`)));
      expect(ndjson).toBe(stored.map((r) => `${JSON.stringify(r)}\n`).join(''));
      expect(chunks.reduce((n, c) => n + c.count, 0)).toBe(texts.length);
      expect(chunks.length).toBeGreaterThan(1);
    });

    it('names the types with a version at or before the snapshot, so that the others are not read', async () => {
      const storage = postgresStorage({ connectionString, schema: freshSchema() });
      afterTest(() => storage.close());
      await storage.createResource('p1', { resourceType: 'Patient', id: 'pat' });
      await storage.createResource('p1', { resourceType: 'Condition', id: 'gone' });
      await storage.deleteResource('p1', 'Condition', 'gone');
      await storage.createResource('p2', { resourceType: 'Encounter', id: 'other-project' });
      const snapshot = await storage.exportSnapshot('p1');
      await storage.createResource('p1', { resourceType: 'Device', id: 'after' });
      const reader = storage.exportReader;
      const asked = ['Patient', 'Condition', 'Encounter', 'Device', 'Observation'];
      // A deleted type counts (a `_since` export lists its deletions); another project's and a
      // later write's do not.
      expect([...(await reader.typesWithVersions!('p1', snapshot, asked))].sort()).toEqual([
        'Condition',
        'Patient',
      ]);
      expect(
        [...(await reader.typesWithVersions!('p1', await storage.exportSnapshot('p1'), asked))].sort(),
      ).toEqual(['Condition', 'Device', 'Patient']);
    });

    it('refuses a body that is not single-line JSON (written behind the store’s back)', async () => {
      const schema = freshSchema();
      const storage = postgresStorage({ connectionString, schema });
      afterTest(() => storage.close());
      await storage.createResource('p1', { resourceType: 'Basic', id: 'b' });
      const admin = new pg.Client({ connectionString });
      await admin.connect();
      try {
        await admin.query(`UPDATE "${schema}".resources SET body = $1`, [
          '{"resourceType":"Basic",\n"id":"b"}',
        ]);
      } finally {
        await admin.end();
      }
      const snapshot = await storage.exportSnapshot('p1');
      await expect(
        collect(storage.exportReader.readResources('p1', snapshot, { resourceType: 'Basic' })),
      ).rejects.toMatchObject({ code: 'ERR_STORAGE_CORRUPT' });
      // The connection of the failed COPY was dropped, not reused: the store goes on working.
      expect((await storage.readResource('p1', 'Basic', 'b')).id).toBe('b');
    });
  });
}

describe('PostgreSQL export files with the database gone (no server needed)', () => {
  it('every read, write and removal fails as StorageUnavailableError (503, transient), never a raw pg error', async () => {
    // Port 1 on the loopback refuses connections: the database is unreachable.
    const files = openPostgresExportFiles({ connectionString: 'postgres://postgres@127.0.0.1:1/test' });
    afterTest(() => files.close());
    const ref = { projectId: 'p1', jobId: 'j1' };
    const attempts: [string, () => Promise<unknown>][] = [
      ['size', () => files.size(ref, 'Patient.ndjson')],
      ['bytes', () => files.bytes(ref)],
      ['remove', () => files.remove(ref)],
      ['read', () => collect(files.read(ref, 'Patient.ndjson'))],
      ['create', () => files.sink(ref).create('Patient.ndjson')],
    ];
    for (const [what, attempt] of attempts) {
      const error = await attempt().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, what).toBeInstanceOf(StorageUnavailableError);
    }
  });
});
