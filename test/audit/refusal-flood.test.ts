import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import { PLATFORM_AUDIT_PROJECT_ID } from '../../src/audit/trail.js';
import { createPlatformApp, type PlatformTestApp } from '../helpers/platform-app.js';

const apps: PlatformTestApp[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

async function stored(t: PlatformTestApp, projectId: string): Promise<AuditEventResource[]> {
  const page = await t.storage.searchResources(projectId, 'AuditEvent', { count: 1000 });
  return page.resources as unknown as AuditEventResource[];
}

/** How many requests an event stands for: its `count` detail, else 1. */
function countOf(event: AuditEventResource): number {
  const details = (event.entity ?? []).flatMap((e) => e.detail ?? []);
  const count = details.find((d) => d.type === 'count')?.valueString;
  return count === undefined ? 1 : Number(count);
}

/** A refused request's event (DICOM 110132 Use of Restricted Function). */
const isRefusal = (event: AuditEventResource) => event.subtype?.some((c) => c.code === '110132') ?? false;

describe('a flood of refused requests', () => {
  it('anonymous 401s with a 14 KB query: two bounded events in the platform log, the count exact', async () => {
    const t = await createPlatformApp({ bulk: false });
    apps.push(t);
    const query = 'x'.repeat(14 * 1024);
    const n = 60;
    for (let i = 0; i < n; i++) {
      const res = await request(t.app).get(`/fhir/R4/Patient?x=${query}&i=${i}`);
      expect(res.status).toBe(401);
    }
    await t.platform.close(); // records the count of the window still open

    const events = await stored(t, PLATFORM_AUDIT_PROJECT_ID);
    expect(events).toHaveLength(2);
    expect(events.map(countOf).reduce((a, b) => a + b, 0)).toBe(n);
    const [first, summary] = events.sort((x, y) => countOf(x) - countOf(y));
    expect(countOf(first!)).toBe(1);
    expect(summary!.period?.start).toBeDefined();
    expect(summary!.period!.start <= summary!.period!.end).toBe(true);
    for (const event of events) {
      expect(JSON.stringify(event).length).toBeLessThan(3 * 1024);
      const line = event.entity!.find((e) => e.description?.startsWith('GET '))!;
      // The path and query cut to maxUrlLength (1024 by default), marked with its full length.
      expect(line.description!.length).toBeLessThanOrEqual('GET '.length + 1024 + 1);
      expect(line.description!.endsWith('…')).toBe(true);
      const full = line.detail!.find((d) => d.type === 'truncated')?.valueString;
      expect(Number(full)).toBeGreaterThan(14 * 1024);
    }
  });

  it('refusals of two addresses, and of two projects, are counted apart', async () => {
    const t = await createPlatformApp({ bulk: false });
    apps.push(t);
    t.app.set('trust proxy', true);
    const a = await t.initProject('A');
    const b = await t.initProject('B');
    const clientA = await t.newClient(a, { name: 'a', scope: 'system/Patient.rs' });
    const clientB = await t.newClient(b, { name: 'b', scope: 'system/Patient.rs' });
    const authA = await t.bearer(clientA.id, clientA.secret);
    const authB = await t.bearer(clientB.id, clientB.secret);
    const get = (path: string, address: string, auth?: string) => {
      const req = request(t.app).get(path).set('X-Forwarded-For', address);
      return auth === undefined ? req : req.set('Authorization', auth);
    };
    for (let i = 0; i < 5; i++) {
      expect((await get(`/fhir/R4/Patient/x${i}`, '198.51.100.1')).status).toBe(401);
      expect((await get(`/fhir/R4/Patient/x${i}`, '198.51.100.2')).status).toBe(401);
      expect((await get(`/fhir/R4/Observation?i=${i}`, '198.51.100.3', authA)).status).toBe(403);
      expect((await get(`/fhir/R4/Observation?i=${i}`, '198.51.100.3', authB)).status).toBe(403);
    }
    await t.platform.close();

    // (the platform log also holds the super admin's tokens, the projects their $init)
    const anonymous = (await stored(t, PLATFORM_AUDIT_PROJECT_ID)).filter(isRefusal);
    const byAddress = new Map<string, number>();
    for (const event of anonymous) {
      const address = event.agent[0]!.network!.address;
      byAddress.set(address, (byAddress.get(address) ?? 0) + countOf(event));
    }
    expect(Object.fromEntries(byAddress)).toEqual({ '198.51.100.1': 5, '198.51.100.2': 5 });
    expect(anonymous).toHaveLength(4);
    for (const project of [a, b]) {
      const events = await stored(t, project);
      const refused = events.filter(isRefusal);
      expect(refused).toHaveLength(2);
      expect(refused.map(countOf).reduce((x, y) => x + y, 0)).toBe(5);
    }
  });
});
