import { compartmentSearch } from '../storage/search-request.js';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditRecord } from '../audit/events.js';
import { createAuditTrail, PLATFORM_AUDIT_PROJECT_ID, type AuditTrail } from '../audit/trail.js';
import type { Storage } from '../storage/types.js';

const access = (projectId: string | null, patient: string): AuditRecord => ({
  kind: 'fhir-access',
  interaction: 'read',
  projectId,
  actor: { kind: 'client', id: 'c-1' },
  address: '10.0.0.9',
  resourceType: 'Patient',
  reference: `Patient/${patient}`,
});

/**
 * The audit trail's part of the storage contract: AuditEvents are ordinary resources of their
 * project, written in batches by the trail (never through the API), the platform log lives under
 * `PLATFORM_AUDIT_PROJECT_ID` without a project record, replays are recognised by id, and the
 * retention sweep removes old events. Called inside `runStorageContract`.
 */
export function auditStorageContract(getStorage: () => Storage): void {
  describe('audit events', () => {
    const trails: AuditTrail[] = [];
    const dirs: string[] = [];
    afterEach(async () => {
      for (const trail of trails.splice(0)) await trail.close();
      for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
    });
    const trailOf = (options: Partial<Parameters<typeof createAuditTrail>[0]> = {}) => {
      const trail = createAuditTrail({ storage: getStorage(), flushIntervalMs: 60_000, ...options });
      trails.push(trail);
      return trail;
    };

    it('stores each event as an AuditEvent of its project; no project: the platform log', async () => {
      const storage = getStorage();
      await storage.createProject({ id: 'p1', name: 'P1', strictMode: true });
      const trail = trailOf();
      const a = trail.record(access('p1', 'pa'))!;
      const b = trail.record(access('p2', 'pb'))!;
      const c = trail.record(access(null, 'pc'))!;
      await trail.flush();
      const stored = await storage.readResource('p1', 'AuditEvent', a.id!);
      expect({ ...stored, meta: undefined }).toEqual({ ...a, meta: undefined });
      expect(stored.meta.versionId).toBe('1');
      expect((await storage.readResource('p2', 'AuditEvent', b.id!)).id).toBe(b.id);
      expect((await storage.readResource(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent', c.id!)).id).toBe(c.id);
      // Never visible from another project.
      await expect(storage.readResource('p2', 'AuditEvent', a.id!)).rejects.toMatchObject({
        code: 'ERR_STORAGE_NOT_FOUND',
      });
      const p2 = await storage.searchResources('p2', 'AuditEvent');
      expect(p2.resources.map((r) => r.id)).toEqual([b.id]);
      // The platform log is no project.
      expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p1']);
      // The patient compartment index knows them (AuditEvent.entity.what).
      const compartment = await storage.searchResources('p1', 'AuditEvent', {
        search: compartmentSearch('AuditEvent', ['pa']),
      });
      expect(compartment.resources.map((r) => r.id)).toEqual([a.id]);
    });

    it('writes a large batch in chunks', async () => {
      const storage = getStorage();
      const trail = trailOf({ batchSize: 50 });
      for (let i = 0; i < 120; i++) trail.record(access('p1', `p${i}`));
      await trail.flush();
      expect((await storage.searchResources('p1', 'AuditEvent', { count: 0 })).total).toBe(120);
    });

    it('replays a journal left by a dead process once, skipping what the store already has', async () => {
      const storage = getStorage();
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-audit-contract-'));
      dirs.push(dir);
      const first = trailOf();
      const kept = first.record(access('p1', 'x1'))!;
      await first.flush();
      const lost = { ...kept, id: 'replayed-1' };
      fs.writeFileSync(
        path.join(dir, '000000000007.ndjson'),
        `${JSON.stringify({ p: 'p1', e: kept })}\n${JSON.stringify({ p: null, e: lost })}\n`,
      );
      const trail = trailOf({ journalDir: dir });
      await trail.flush();
      const p1 = await storage.searchResources('p1', 'AuditEvent');
      expect(p1.resources.map((r) => r.id)).toEqual([kept.id]);
      expect(p1.resources[0]?.meta.versionId).toBe('1');
      const platform = await storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent');
      expect(platform.resources.map((r) => r.id)).toEqual(['replayed-1']);
      expect(fs.existsSync(path.join(dir, '000000000007.ndjson'))).toBe(false);
    });

    it('the retention sweep removes events older than retentionDays, in projects and the platform log', async () => {
      const storage = getStorage();
      await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
      const trail = trailOf({ retentionDays: 30 });
      trail.record(access('p1', 'a'));
      trail.record(access(null, 'b'));
      await trail.flush();
      expect(await trail.sweep()).toBe(0);
      expect(await trail.sweep(new Date(Date.now() + 29 * 86_400_000))).toBe(0);
      expect(await trail.sweep(new Date(Date.now() + 31 * 86_400_000))).toBe(2);
      expect((await storage.searchResources('p1', 'AuditEvent')).total).toBe(0);
      expect((await storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent')).total).toBe(0);
    });

    it('deleteProject removes its events, not the platform log', async () => {
      const storage = getStorage();
      await storage.createProject({ id: 'p1', name: 'P1', strictMode: false });
      const trail = trailOf();
      trail.record(access('p1', 'a'));
      const platform = trail.record(access(null, 'b'))!;
      await trail.flush();
      await storage.deleteProject('p1');
      expect((await storage.searchResources('p1', 'AuditEvent')).total).toBe(0);
      const left = await storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent');
      expect(left.resources.map((r) => r.id)).toEqual([platform.id]);
    });
  });
}
