import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AuditEventResource } from '../../src/audit/audit-event-resource.js';
import type { AuditRecord, RefusedEvent, TokenEvent } from '../../src/audit/events.js';
import type { AuditContext } from '../../src/audit/options.js';
import {
  createAuditTrail,
  PLATFORM_AUDIT_PROJECT_ID,
  type AuditTrailOptions,
} from '../../src/audit/trail.js';
import { memoryStorage } from '../../src/stores.js';

const WINDOW = 1000;

function refused(address: string, extra: Partial<RefusedEvent> = {}): RefusedEvent {
  return {
    kind: 'refused',
    status: 401,
    method: 'GET',
    path: '/fhir/R4/Patient?name=x',
    projectId: null,
    actor: { kind: 'anonymous' },
    address,
    ...extra,
  };
}

function tokenRefused(address: string, extra: Partial<TokenEvent> = {}): TokenEvent {
  return {
    kind: 'token',
    result: 'refused',
    error: 'invalid_client',
    projectId: null,
    actor: { kind: 'anonymous' },
    address,
    ...extra,
  };
}

/** How many refusals an event stands for: its `count` detail, else 1. */
function countOf(event: AuditEventResource): number {
  const count = (event.entity ?? []).flatMap((e) => e.detail ?? []).find((d) => d.type === 'count');
  return count === undefined ? 1 : Number(count.valueString);
}

function detailOf(event: AuditEventResource, type: string): string | undefined {
  return (event.entity ?? []).flatMap((e) => e.detail ?? []).find((d) => d.type === type)?.valueString;
}

const sum = (events: AuditEventResource[]) => events.reduce((n, e) => n + countOf(e), 0);

describe('refusals counted per source', () => {
  const closers: (() => Promise<void>)[] = [];
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    vi.setSystemTime(new Date('2026-11-23T10:00:00Z'));
  });
  afterEach(async () => {
    vi.useRealTimers();
    for (const close of closers.splice(0)) await close();
  });

  /** A trail on a memory store with every event it records (`onAudit`). */
  function open(options: Partial<AuditTrailOptions> = {}) {
    const storage = memoryStorage();
    const seen: { event: AuditEventResource; context: AuditContext }[] = [];
    const trail = createAuditTrail({
      storage,
      flushIntervalMs: 60_000,
      refusalWindowMs: WINDOW,
      onAudit: (event, context) => void seen.push({ event, context }),
      ...options,
    });
    closers.push(() => trail.close());
    const events = () => seen.map((s) => s.event);
    return { storage, trail, seen, events };
  }

  it('records the first refusal of a window at once, counts the others, records the count when it ends', () => {
    const { trail, seen, events } = open();
    expect(trail.record(refused('198.51.100.7'))).toBeDefined();
    for (let i = 0; i < 9; i++) {
      vi.advanceTimersByTime(50);
      expect(trail.record(refused('198.51.100.7', { path: `/fhir/R4/Patient?i=${i}` }))).toBeUndefined();
    }
    expect(events()).toHaveLength(1);
    vi.advanceTimersByTime(WINDOW - 450 - 1);
    expect(events()).toHaveLength(1);
    vi.advanceTimersByTime(1);
    expect(events()).toHaveLength(2);
    const count = events()[1]!;
    expect(countOf(count)).toBe(9);
    // It describes the first refusal counted, and when the counted ones came.
    expect(count.entity?.[0]?.description).toBe('GET /fhir/R4/Patient?i=0');
    expect(count.period).toEqual({ start: '2026-11-23T10:00:00.050Z', end: '2026-11-23T10:00:00.450Z' });
    expect(count.recorded).toBe('2026-11-23T10:00:01.000Z');
    expect(count.agent[0]?.network?.address).toBe('198.51.100.7');
    expect(seen[1]?.context.record).toMatchObject({ kind: 'refused', repeated: { count: 9 } });
    // The next window starts over.
    expect(trail.record(refused('198.51.100.7'))).toBeDefined();
    expect(events()).toHaveLength(3);
  });

  it('keeps the count exact: 10,000 refusals from one address are two stored events', async () => {
    const { storage, trail } = open();
    for (let i = 0; i < 10_000; i++) trail.record(refused('203.0.113.9'));
    await trail.close();
    const page = await storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent');
    const stored = page.resources as unknown as AuditEventResource[];
    expect(stored).toHaveLength(2);
    expect(sum(stored)).toBe(10_000);
  });

  it('records a single counted refusal as it came', () => {
    const { trail, events } = open();
    trail.record(refused('192.0.2.1'));
    vi.advanceTimersByTime(100);
    trail.record(refused('192.0.2.1', { status: 401, path: '/fhir/R4/Observation' }));
    vi.advanceTimersByTime(WINDOW);
    expect(events()).toHaveLength(2);
    expect(events()[1]).toMatchObject({ recorded: '2026-11-23T10:00:00.100Z' });
    expect(events()[1]?.period).toBeUndefined();
    expect(detailOf(events()[1]!, 'count')).toBeUndefined();
  });

  it('counts addresses, statuses, projects and clients apart', async () => {
    const { trail, events } = open();
    const sources: RefusedEvent[] = [
      refused('192.0.2.1'),
      refused('192.0.2.2'),
      refused('192.0.2.1', { status: 404 }),
      refused('192.0.2.1', { status: 403, projectId: 'p1', actor: { kind: 'client', id: 'c1' } }),
      refused('192.0.2.1', { status: 403, projectId: 'p1', actor: { kind: 'client', id: 'c2' } }),
      refused('192.0.2.1', { status: 403, projectId: 'p2', actor: { kind: 'client', id: 'c3' } }),
    ];
    for (let i = 0; i < 3; i++) for (const source of sources) trail.record(source);
    expect(events()).toHaveLength(sources.length);
    await trail.close();
    expect(events()).toHaveLength(2 * sources.length);
    for (const event of events().slice(sources.length)) expect(countOf(event)).toBe(2);
  });

  it('counts refused token requests too: unknown client ids from one address are one source', async () => {
    const { trail, seen, events } = open();
    for (let i = 0; i < 5; i++)
      trail.record(tokenRefused('192.0.2.5', { actor: { kind: 'anonymous', id: `guess-${i}` } }));
    // A client of a project: its own source, in its project.
    for (let i = 0; i < 3; i++) {
      trail.record(tokenRefused('192.0.2.5', { projectId: 'p1', actor: { kind: 'anonymous', id: 'etl' } }));
    }
    trail.record(tokenRefused('192.0.2.5', { error: 'slow_down' }));
    expect(events()).toHaveLength(3);
    await trail.close();
    expect(seen.map((s) => [s.context.projectId, countOf(s.event)])).toEqual([
      [null, 1],
      ['p1', 1],
      [null, 1],
      [null, 4],
      ['p1', 2],
    ]);
    // The count names the first client id counted.
    expect(events()[3]?.agent[0]?.altId).toBe('guess-1');
  });

  it('over maxRefusalSources, counts further sources together in the platform log, without address', async () => {
    const { trail, seen } = open({ maxRefusalSources: 3 });
    for (let round = 0; round < 2; round++) {
      for (let i = 0; i < 5; i++) {
        trail.record(
          refused(`192.0.2.${i}`, { status: 403, projectId: 'p1', actor: { kind: 'client', id: 'c' } }),
        );
      }
    }
    expect(seen).toHaveLength(3);
    await trail.close();
    // The first three sources: their first at once, their second as it came; the two others together.
    expect(seen).toHaveLength(7);
    const overflow = seen[6]!;
    expect(overflow.context.projectId).toBeNull();
    expect(countOf(overflow.event)).toBe(4);
    expect(detailOf(overflow.event, 'overflow')).toBe('true');
    expect(overflow.event.agent[0]?.network).toBeUndefined();
    expect(overflow.event.agent[0]?.altId).toBeUndefined();
    expect(seen.reduce((n, s) => n + countOf(s.event), 0)).toBe(10);
  });

  it('refusalWindowMs: 0 records every refusal', () => {
    const { trail, events } = open({ refusalWindowMs: 0 });
    for (let i = 0; i < 5; i++) expect(trail.record(refused('192.0.2.1'))).toBeDefined();
    expect(events()).toHaveLength(5);
  });

  it('each trail counts its own refusals', () => {
    const a = open();
    const b = open();
    a.trail.record(refused('192.0.2.1'));
    b.trail.record(refused('192.0.2.1'));
    expect(a.events()).toHaveLength(1);
    expect(b.events()).toHaveLength(1);
  });

  it('is written by close(), which records the open windows; record throws afterwards', async () => {
    const { storage, trail } = open();
    trail.record(refused('192.0.2.1'));
    trail.record(refused('192.0.2.1'));
    trail.record(refused('192.0.2.1'));
    await trail.close();
    const page = await storage.searchResources(PLATFORM_AUDIT_PROJECT_ID, 'AuditEvent');
    expect(sum(page.resources as unknown as AuditEventResource[])).toBe(3);
    expect(() => trail.record(refused('192.0.2.1'))).toThrow(/closed/);
  });
});

describe('the request text a refusal keeps', () => {
  const record = (r: AuditRecord, options: Partial<AuditTrailOptions> = {}) => {
    const seen: AuditContext[] = [];
    const trail = createAuditTrail({
      storage: memoryStorage(),
      flushIntervalMs: 60_000,
      onAudit: (_event, context) => void seen.push(context),
      ...options,
    });
    const event = trail.record(r)!;
    void trail.close();
    return { event, record: seen[0]!.record };
  };

  it('cuts the path and query to maxUrlLength and says so', () => {
    const path = `/fhir/R4/Patient?x=${'a'.repeat(5000)}`;
    const { event, record: stored } = record(refused('192.0.2.1', { path }));
    const request = event.entity!.at(-1)!;
    expect(request.description).toBe(`GET ${path.slice(0, 1024)}…`);
    expect(detailOf(event, 'truncated')).toBe(String(path.length));
    expect(stored).toMatchObject({ path: path.slice(0, 1024), pathLength: path.length });
    expect(JSON.stringify(event).length).toBeLessThan(1024 + 2048);

    const short = record(refused('192.0.2.1', { path: '/fhir/R4/Patient?x=1' }), { maxUrlLength: 20 });
    expect(short.event.entity!.at(-1)!.description).toBe('GET /fhir/R4/Patient?x=1');
    expect(detailOf(short.event, 'truncated')).toBeUndefined();
  });

  it('never keeps half of a surrogate pair', () => {
    const { record: stored } = record(refused('192.0.2.1', { path: `/x/${'😀'.repeat(10)}` }), {
      maxUrlLength: 6,
    });
    expect((stored as RefusedEvent).path).toBe('/x/😀');
  });

  it("cuts a refused token request's scope (whole scopes) and claimed client id", () => {
    const scopes = Array.from({ length: 200 }, (_, i) => `system/Patient${i}.rs`);
    const { event, record: stored } = record(
      tokenRefused('192.0.2.1', { scopes, actor: { kind: 'anonymous', id: 'c'.repeat(300) } }),
      { maxUrlLength: 100 },
    );
    const kept = (stored as TokenEvent).scopes!;
    expect(kept.join(' ').length).toBeLessThanOrEqual(100);
    expect(kept).toEqual(scopes.slice(0, kept.length));
    expect(detailOf(event, 'truncated')).toBe(String(scopes.join(' ').length));
    expect(event.agent[0]?.altId).toBe(`${'c'.repeat(100)}…`);
  });

  it('is checked with the other options', () => {
    const storage = memoryStorage();
    for (const [option, value] of [
      ['maxUrlLength', 0],
      ['refusalWindowMs', -1],
      ['refusalWindowMs', 1.5],
      ['refusalWindowMs', 3_600_001],
      ['maxRefusalSources', 0],
    ] as const) {
      let error: unknown;
      try {
        createAuditTrail({ storage, [option]: value });
      } catch (e) {
        error = e;
      }
      expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: `audit.${option}` });
    }
  });
});
