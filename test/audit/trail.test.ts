import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { AuditRecord } from '../../src/audit/events.js';
import { resolveAuditOptions } from '../../src/audit/options.js';
import { createAuditTrail, PLATFORM_AUDIT_PROJECT_ID, type AuditTrail } from '../../src/audit/trail.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { tempDir } from '../helpers/temp-dir.js';
import { PATIENCE_MS } from '../helpers/eventually.js';

const read = (projectId: string | null, i = 0): AuditRecord => ({
  kind: 'fhir-access',
  interaction: 'read',
  projectId,
  actor: { kind: 'client', id: 'c-1' },
  resourceType: 'Patient',
  reference: `Patient/p${i}`,
});

async function stored(storage: Storage, projectId: string): Promise<string[]> {
  const page = await storage.searchResources(projectId, 'AuditEvent');
  return page.resources.map((r) => r.id);
}

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return (error as { code?: string }).code;
  }
  return undefined;
}

describe('createAuditTrail', () => {
  const trails: AuditTrail[] = [];
  const open = (...args: Parameters<typeof createAuditTrail>) => {
    const trail = createAuditTrail(...args);
    trails.push(trail);
    return trail;
  };
  afterEach(async () => {
    for (const trail of trails.splice(0)) await trail.close();
  });

  it('writes events in batches off the request path, each in its project; no project: the platform log', async () => {
    const storage = memoryStorage();
    const trail = open({ storage, flushIntervalMs: 60_000 });
    const a = trail.record(read('p1'))!;
    const b = trail.record(read('p2'))!;
    const c = trail.record(read(null))!;
    expect(await stored(storage, 'p1')).toEqual([]);
    await trail.flush();
    expect(await stored(storage, 'p1')).toEqual([a.id]);
    expect(await stored(storage, 'p2')).toEqual([b.id]);
    expect(await stored(storage, PLATFORM_AUDIT_PROJECT_ID)).toEqual([c.id]);
    const event = await storage.readResource('p1', 'AuditEvent', a.id!);
    expect(event).toMatchObject({ resourceType: 'AuditEvent', action: 'R', recorded: a.recorded });
    expect(await storage.listProjects()).toEqual([]);
  });

  it('writes by itself after flushIntervalMs, and at once when batchSize events are queued', async () => {
    const storage = memoryStorage();
    const timed = open({ storage, flushIntervalMs: 20 });
    const event = timed.record(read('p1'))!;
    await expect.poll(() => stored(storage, 'p1'), { timeout: PATIENCE_MS }).toEqual([event.id]);

    const full = open({ storage, flushIntervalMs: 60_000, batchSize: 3 });
    for (let i = 0; i < 3; i++) full.record(read('p2', i));
    await expect.poll(async () => (await stored(storage, 'p2')).length, { timeout: PATIENCE_MS }).toBe(3);
  });

  it('onAudit receives every event; its failures go to onError and never reach the caller', async () => {
    const storage = memoryStorage();
    const seen: [string, string | null][] = [];
    const errors: unknown[] = [];
    let n = 0;
    const trail = open({
      storage,
      onError: (e) => errors.push(e),
      onAudit: (event, context) => {
        seen.push([event.id!, context.projectId]);
        n += 1;
        if (n === 2) throw new Error('sync failure');
        if (n === 3) return Promise.reject(new Error('async failure'));
      },
    });
    const ids = [trail.record(read('p1'))!.id, trail.record(read(null))!.id, trail.record(read('p1'))!.id];
    expect(seen).toEqual([
      [ids[0], 'p1'],
      [ids[1], null],
      [ids[2], 'p1'],
    ]);
    await trail.flush();
    await expect
      .poll(() => errors.map((e) => (e as Error).message))
      .toEqual(['sync failure', 'async failure']);
    expect((await stored(storage, 'p1')).sort()).toEqual([ids[0], ids[2]].sort());
  });

  it('a failed storage write keeps the batch and writes it once later, even when the failure came after the write', async () => {
    const storage = memoryStorage();
    let failures = 0;
    const flaky: Storage = Object.create(storage) as Storage;
    flaky.writeResources = async (projectId, writes) => {
      failures += 1;
      if (failures === 1) throw new Error('database down');
      if (failures === 2) {
        await storage.writeResources(projectId, writes); // applied, then the answer is lost
        throw new Error('connection reset');
      }
      return storage.writeResources(projectId, writes);
    };
    const errors: unknown[] = [];
    const trail = open({ storage: flaky, flushIntervalMs: 60_000, onError: (e) => errors.push(e) });
    const ids = [trail.record(read('p1', 1))!.id, trail.record(read('p1', 2))!.id];
    await expect(trail.flush()).rejects.toThrow('database down');
    await expect(trail.flush()).rejects.toThrow('connection reset');
    const later = trail.record(read('p1', 3))!.id;
    await trail.flush();
    expect((await stored(storage, 'p1')).sort()).toEqual([...ids, later].sort());
  });

  it('enabled: false records nothing', async () => {
    const storage = memoryStorage();
    let called = false;
    const trail = open({ storage, enabled: false, onAudit: () => void (called = true) });
    expect(trail.enabled).toBe(false);
    expect(trail.record(read('p1'))).toBeUndefined();
    await trail.flush();
    expect(await stored(storage, 'p1')).toEqual([]);
    expect(called).toBe(false);
  });

  it('retention: the sweep removes events older than retentionDays from projects and the platform log', async () => {
    const storage = memoryStorage();
    const trail = open({ storage, retentionDays: 30, flushIntervalMs: 60_000 });
    // Events recorded (and stored) 40 days ago (before anything else: the store's clock never goes back).
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() - 40 * 86_400_000 });
    try {
      trail.record(read('p1'));
      trail.record(read(null));
      await trail.flush();
    } finally {
      vi.useRealTimers();
    }
    await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
    const recent = trail.record(read('p1'))!;
    await trail.flush();
    expect(await trail.sweep()).toBe(2);
    expect(await stored(storage, 'p1')).toEqual([recent.id]);
    expect(await stored(storage, PLATFORM_AUDIT_PROJECT_ID)).toEqual([]);
    expect(await trail.sweep()).toBe(0);
    // 31 days on, the recent one is due too.
    expect(await trail.sweep(new Date(Date.now() + 31 * 86_400_000))).toBe(1);
    expect(await stored(storage, 'p1')).toEqual([]);
    const keepForever = open({ storage });
    expect(await keepForever.sweep(new Date(Date.now() + 1e12))).toBe(0);
  });

  it('checks its options', () => {
    const storage = memoryStorage();
    expect(code(() => createAuditTrail({ storage, retentionDays: -1 }))).toBe('ERR_INVALID_OPTION');
    expect(code(() => createAuditTrail({ storage, sourceName: ' ' }))).toBe('ERR_INVALID_OPTION');
    expect(code(() => createAuditTrail({ storage, batchSize: 0 }))).toBe('ERR_INVALID_OPTION');
    expect(code(() => createAuditTrail({ storage, enabled: 'yes' as unknown as boolean }))).toBe(
      'ERR_INVALID_OPTION',
    );
    expect(code(() => createAuditTrail({ storage, onAudit: 1 as never }))).toBe('ERR_INVALID_OPTION');
    expect(code(() => createAuditTrail({ storage: undefined as unknown as Storage }))).toBe(
      'ERR_INVALID_OPTION',
    );
  });

  describe('journal', () => {
    it('holds each event before record returns, replays what the store lacks on start, then empties', async () => {
      const dir = tempDir('fpk-audit-journal-');
      const storage = memoryStorage();
      const first = createAuditTrail({ storage, journalDir: dir, flushIntervalMs: 60_000 });
      const a = first.record(read('p1', 1))!;
      await first.flush(); // a is stored, its segment removed
      const b = first.record(read('p1', 2))!;
      const c = first.record(read(null, 3))!;
      const segments = fs.readdirSync(dir).filter((f) => f.endsWith('.ndjson'));
      const text = segments.map((f) => fs.readFileSync(path.join(dir, f), 'utf8')).join('');
      expect(text).toContain(b.id);
      expect(text).toContain(c.id);
      expect(text).not.toContain(a.id);
      // The process dies: its lock is left behind, no close. Simulated by removing the lock of this
      // (live) process, which a dead owner's lock would be treated as.
      fs.rmSync(path.join(dir, 'lock'));
      const second = open({ storage, journalDir: dir });
      await second.flush();
      expect((await stored(storage, 'p1')).sort()).toEqual([a.id, b.id].sort());
      expect(await stored(storage, PLATFORM_AUDIT_PROJECT_ID)).toEqual([c.id]);
      expect(
        fs.readdirSync(dir).filter((f) => f.endsWith('.ndjson') && fs.statSync(path.join(dir, f)).size > 0),
      ).toEqual([]);
    });

    it('ignores a torn last line, reports damaged ones, and skips events already stored', async () => {
      const dir = tempDir('fpk-audit-journal-');
      const storage = memoryStorage();
      const good = { resourceType: 'AuditEvent', id: 'e-1', recorded: '2026-01-01T00:00:00.000Z' };
      await storage.createResource('p1', { ...good, id: 'e-0' });
      fs.writeFileSync(
        path.join(dir, '000000000001.ndjson'),
        [
          JSON.stringify({ p: 'p1', e: { ...good, id: 'e-0' } }),
          'not json',
          JSON.stringify({ p: 'p1', e: good }),
          '{"p":"p1","e":{"resourceT',
        ].join('\n'),
      );
      const errors: unknown[] = [];
      const trail = open({ storage, journalDir: dir, onError: (e) => errors.push(e) });
      await trail.flush();
      expect((await stored(storage, 'p1')).sort()).toEqual(['e-0', 'e-1']);
      expect(errors.map((e) => (e as Error).message)).toEqual(['1 unreadable line(s) in the audit journal']);
      expect(fs.existsSync(path.join(dir, '000000000001.ndjson'))).toBe(false);
    });

    it('is owned by one trail at a time', () => {
      const dir = tempDir('fpk-audit-journal-');
      const storage = memoryStorage();
      open({ storage, journalDir: dir });
      expect(code(() => createAuditTrail({ storage, journalDir: dir }))).toBe('ERR_STORAGE_LOCKED');
    });
  });
});

describe('audit options', () => {
  it('batches every 100 ms without a journal, every second with one (events are durable at once)', () => {
    expect(resolveAuditOptions('t', {}).flushIntervalMs).toBe(100);
    expect(resolveAuditOptions('t', { journalDir: '/tmp/j' }).flushIntervalMs).toBe(1000);
    expect(resolveAuditOptions('t', { journalDir: '/tmp/j', flushIntervalMs: 50 }).flushIntervalMs).toBe(50);
  });
});
