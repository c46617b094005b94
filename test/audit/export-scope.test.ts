import { describe, expect, it } from 'vitest';
import type { Principal } from '../../src/http/principal.js';
import { canExport, planExport } from '../../src/bulk/export-plan.js';
import type { ExportParams } from '../../src/bulk/kickoff-params.js';
import { memoryStorage } from '../../src/stores.js';

const principal = (scopes: string[], admin: boolean): Principal => ({
  projectId: 'p1',
  kind: 'client',
  id: 'c1',
  scopes,
  admin,
  superAdmin: false,
});
const params = (extra: Partial<ExportParams> = {}): ExportParams => ({
  level: 'system',
  outputFormat: 'application/fhir+ndjson',
  lenient: false,
  ...extra,
});
const code = async (promise: Promise<unknown>) => {
  try {
    await promise;
  } catch (error) {
    return (error as { status?: number }).status;
  }
  return undefined;
};

describe('bulk export of AuditEvent: project admins whose token names it', () => {
  const storage = memoryStorage();
  const auditor = principal(['project:admin', 'system/*.read', 'system/AuditEvent.rs'], true);

  it('a system export includes AuditEvent only for them', async () => {
    const withTrail = await planExport(storage, 'p1', auditor, params(), []);
    expect(withTrail.types).toContain('AuditEvent');
    expect(withTrail.types).toContain('Patient');
    for (const other of [
      principal(['project:admin', 'system/*.read'], true),
      principal(['system/*.*', 'system/AuditEvent.rs'], false),
    ]) {
      const plan = await planExport(storage, 'p1', other, params(), []);
      expect(plan.types).not.toContain('AuditEvent');
      expect(plan.types).toContain('Patient');
    }
  });

  it('_type=AuditEvent is a 403 for anyone else (downloads ask the same canExport)', async () => {
    expect((await planExport(storage, 'p1', auditor, params({ types: ['AuditEvent'] }), [])).types).toEqual([
      'AuditEvent',
    ]);
    expect(
      await code(
        planExport(
          storage,
          'p1',
          principal(['project:admin', 'system/*.*'], true),
          params({ types: ['AuditEvent'] }),
          [],
        ),
      ),
    ).toBe(403);
    expect(canExport(principal(['system/*.*'], false), 'AuditEvent')).toBe(false);
    expect(canExport(auditor, 'AuditEvent')).toBe(true);
  });
});
