import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { transactionContext, type FhirContext } from '../../src/fhir/context.js';
import { loadNdjson } from '../../src/fhir/upload/ndjson-loader.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage, StorageOperations } from '../../src/storage/types.js';
import { eventually } from '../helpers/eventually.js';

let storage: Storage;
beforeEach(async () => {
  storage = memoryStorage();
  await storage.createProject({ id: 'p', name: 'P', strictMode: false });
});
afterEach(async () => {
  await storage.close();
});

function context(ops: StorageOperations = storage): FhirContext {
  const ctx: FhirContext = {
    storage: ops,
    projectId: 'p',
    principal: {
      projectId: 'p',
      kind: 'client',
      id: 'c',
      scopes: ['system/*.*'],
      admin: false,
      superAdmin: false,
    },
    validate: () => Promise.resolve(),
    atomically: (fn) => storage.transaction((tx) => fn(transactionContext(ctx, tx))),
  };
  return ctx;
}

async function* chunks(...parts: (string | Buffer)[]): AsyncGenerator<string | Buffer> {
  for (const part of parts) yield await Promise.resolve(part);
}

const line = (id: string, extra = '') => `{"resourceType":"Patient","id":"${id}"${extra}}`;

describe('loadNdjson', () => {
  it('splits lines across chunk boundaries, including inside a multibyte character', async () => {
    const text = `${line('a', ',"name":[{"family":"Müller-Łukasz 日本"}]')}\n${line('b')}\r\n\n${line('c')}`;
    const bytes = Buffer.from(text, 'utf8');
    const parts: Buffer[] = [];
    for (let i = 0; i < bytes.length; i += 7) parts.push(bytes.subarray(i, i + 7));
    const report = await loadNdjson(context(), 'f.ndjson', chunks(...parts), { batchSize: 2 });
    expect(report).toMatchObject({ file: 'f.ndjson', lines: 3, loaded: 3, failed: 0, issues: [] });
    const a = await storage.readResource('p', 'Patient', 'a');
    expect((a.name as { family: string }[])[0]!.family).toBe('Müller-Łukasz 日本');
    await storage.readResource('p', 'Patient', 'c');
  });

  it('reports bad lines with their numbers and keeps the good ones', async () => {
    const text = [
      line('a'),
      'nope',
      '[1]',
      '{"resourceType":"Patient","id":"bad id"}',
      line('b'),
      '{"id":"x"}',
    ].join('\n');
    const report = await loadNdjson(context(), 'g.ndjson', chunks(text));
    expect(report.loaded).toBe(2);
    expect(report.failed).toBe(4);
    expect(report.issues.map((i) => i.location)).toEqual([
      ['g.ndjson:2'],
      ['g.ndjson:3'],
      ['g.ndjson:4'],
      ['g.ndjson:6'],
    ]);
  });

  it('skips over-long lines, even spread over many chunks', async () => {
    const long = line('long', `,"text":{"status":"generated","div":"${'z'.repeat(500)}"}`);
    const parts = [line('a') + '\n', ...long.match(/.{1,50}/g)!, '\n', line('b') + '\n'];
    const report = await loadNdjson(context(), 'h.ndjson', chunks(...parts), { maxLineLength: 100 });
    expect(report.loaded).toBe(2);
    expect(report.issues.map((i) => i.location)).toEqual([['h.ndjson:2']]);
    expect(report.issues[0]!.code).toBe('too-costly');
  });

  it('finds the failing lines of a batch the store refused', async () => {
    const refusing: StorageOperations = new Proxy(storage, {
      get(target, prop, receiver) {
        if (prop === 'writeResources') {
          return async (projectId: string, writes: { resource?: { id?: string } }[]) => {
            if (writes.some((w) => w.resource?.id === 'poison')) throw new Error('refused');
            return target.writeResources(projectId, writes as never);
          };
        }
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    const text = [line('a'), line('poison'), line('b')].join('\n');
    const logged: unknown[] = [];
    const report = await loadNdjson(context(refusing), 'i.ndjson', chunks(text), {
      batchSize: 10,
      onError: (e) => logged.push(e),
    });
    expect(logged).toHaveLength(1);
    expect(report.issues[0]!.code).toBe('exception');
    expect(report.loaded).toBe(2);
    expect(report.issues.map((i) => i.location)).toEqual([['i.ndjson:2']]);
  });

  it('writes in batches, reading the next batch while one is written, one write at a time', async () => {
    const events: string[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    const slow: StorageOperations = new Proxy(storage, {
      get(target, prop, receiver) {
        if (prop === 'writeResources') {
          return async (projectId: string, writes: { resource?: { id?: string } }[]) => {
            maxInFlight = Math.max(maxInFlight, ++inFlight);
            events.push(`write ${writes.map((w) => w.resource?.id).join(',')}`);
            // The write ends once the reader is into the next batch (or has no next batch).
            const next = Number(writes[0]!.resource!.id) + 4;
            await eventually(`line ${next} read`, () => next >= 10 || events.includes(`read ${next}`));
            try {
              return await target.writeResources(projectId, writes as never);
            } finally {
              inFlight--;
              events.push('written');
            }
          };
        }
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    async function* lines(): AsyncGenerator<string> {
      for (let i = 0; i < 10; i++) {
        events.push(`read ${i}`);
        yield `${line(String(i))}\n`;
        await Promise.resolve();
      }
    }
    const report = await loadNdjson(context(slow), 'k.ndjson', lines(), { batchSize: 3 });
    expect(report).toMatchObject({ lines: 10, loaded: 10, failed: 0 });
    expect(events.filter((e) => e.startsWith('write'))).toEqual([
      'write 0,1,2',
      'write 3,4,5',
      'write 6,7,8',
      'write 9',
    ]);
    expect(maxInFlight).toBe(1);
    // Lines 3-5 are read while the first batch is written, before it is acknowledged.
    expect(events.indexOf('read 4')).toBeLessThan(events.indexOf('written'));
    expect((await storage.searchResources('p', 'Patient')).total).toBe(10);
  });

  it('ends a batch at 8 MiB of line text whatever the line count', async () => {
    const sizes: number[] = [];
    const counting: StorageOperations = new Proxy(storage, {
      get(target, prop, receiver) {
        if (prop === 'writeResources') {
          return (projectId: string, writes: unknown[]) => {
            sizes.push(writes.length);
            return target.writeResources(projectId, writes as never);
          };
        }
        return Reflect.get(target, prop, receiver) as unknown;
      },
    });
    const big = (id: string) => line(id, `,"text":{"status":"generated","div":"${'z'.repeat(3 << 20)}"}`);
    const report = await loadNdjson(
      context(counting),
      'l.ndjson',
      chunks(`${big('a')}\n${big('b')}\n${big('c')}\n${line('d')}\n`),
      { batchSize: 100 },
    );
    expect(report.loaded).toBe(4);
    expect(sizes).toEqual([3, 1]);
  });

  it('caps the issues reported but counts every failure', async () => {
    const text = Array.from({ length: 30 }, () => 'x').join('\n');
    const report = await loadNdjson(context(), 'j.ndjson', chunks(text), { maxIssues: 5 });
    expect(report.failed).toBe(30);
    expect(report.issues).toHaveLength(5);
  });
});
