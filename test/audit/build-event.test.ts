import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { AUDIT_EXAMPLES, AUDIT_PAGE, auditExampleEvents, examplesIn } from '../../scripts/audit-docs.js';
import { buildAuditEvent } from '../../src/audit/build-event.js';
import { DICOM, RESTFUL_INTERACTION } from '../../src/audit/codes.js';
import type { AuditKind, AuditRecord } from '../../src/audit/events.js';
import { referenceR4Validator } from '../../src/fhir/validation/structure-validator.js';
import type { FhirResource } from '../../src/storage/types.js';

const build = (record: AuditRecord) => buildAuditEvent(record, { sourceName: 'test-server', id: 'ae-1' });
const project = 'p-1';
const client = { kind: 'client', id: 'c-1' } as const;

describe('buildAuditEvent', () => {
  let validate: (resource: FhirResource) => Promise<{ severity: string; details?: { text?: string } }[]>;
  beforeAll(async () => {
    const validator = referenceR4Validator();
    validate = async (resource) => validator(resource);
    await validate({ resourceType: 'Basic', code: { text: 'warm-up' } });
  });

  it('covers every kind of event in the examples', () => {
    const kinds = new Set(AUDIT_EXAMPLES.map((e) => e.record.kind));
    const all: AuditKind[] = [
      'token',
      'scim-user',
      'project-init',
      'client',
      'fhir-write',
      'fhir-access',
      'export',
      'import',
      'download',
      'refused',
      'sign-in',
      'authorization',
    ];
    expect([...kinds].sort()).toEqual([...all].sort());
  });

  it('every example passes strict R4 validation (the library itself, no fast path) without any issue', async () => {
    for (const { title, event } of auditExampleEvents()) {
      const issues = await validate(event);
      expect({ title, issues }).toEqual({ title, issues: [] });
    }
  });

  it('the validation catches a broken event (so the check above can fail)', async () => {
    const { event } = auditExampleEvents().find((e) => e.event.entity?.some((x) => x.query))!;
    const broken = {
      ...event,
      recorded: 'yesterday',
      entity: event.entity?.map((e) => (e.query ? { ...e, name: 'both name and query' } : e)),
    };
    const issues = await validate(broken);
    expect(issues.filter((i) => i.severity === 'error').length).toBeGreaterThanOrEqual(2);
  });

  it('docs/audit-events.md shows exactly the current examples (regenerate with npm run docs:audit)', () => {
    const shown = examplesIn(readFileSync(AUDIT_PAGE, 'utf8'));
    expect(shown).toEqual(auditExampleEvents().map((e) => e.event));
  });

  it('a token grant: DICOM User Authentication / Login, Execute, the client as requestor with its IP', () => {
    const event = build({
      kind: 'token',
      result: 'granted',
      projectId: project,
      actor: client,
      address: '10.0.0.1',
      scopes: ['system/*.rs'],
      recorded: new Date('2026-01-02T03:04:05.006Z'),
    });
    expect(event).toMatchObject({
      resourceType: 'AuditEvent',
      id: 'ae-1',
      type: { system: DICOM, code: '110114' },
      subtype: [{ system: DICOM, code: '110122' }],
      action: 'E',
      recorded: '2026-01-02T03:04:05.006Z',
      outcome: '0',
      agent: [
        {
          who: { identifier: { system: 'urn:fhir-platform-kit:client', value: 'c-1' } },
          requestor: true,
          network: { address: '10.0.0.1', type: '2' },
        },
      ],
      source: { site: 'test-server', observer: { display: 'test-server' } },
    });
    expect(event.entity?.[0]?.detail).toEqual([{ type: 'scope', valueString: 'system/*.rs' }]);
  });

  it('a refused token is a minor failure with the OAuth error', () => {
    const event = build({
      kind: 'token',
      result: 'refused',
      projectId: null,
      actor: { kind: 'anonymous' },
      error: 'invalid_client',
    });
    expect(event).toMatchObject({
      outcome: '4',
      outcomeDesc: 'invalid_client',
      agent: [{ name: 'unauthenticated caller', requestor: true }],
    });
    expect(event.agent[0]?.who).toBeUndefined();
  });

  it('a user agent names its profile and user id; a host name is network type 1', () => {
    const event = build({
      kind: 'fhir-write',
      interaction: 'update',
      projectId: project,
      actor: { kind: 'user', id: 'u-1', profile: 'Practitioner/pr-1' },
      address: 'gateway.local',
      references: ['Observation/o-1'],
    });
    expect(event.agent[0]).toMatchObject({
      who: { reference: 'Practitioner/pr-1', identifier: { value: 'u-1' } },
      network: { address: 'gateway.local', type: '1' },
    });
    expect(event).toMatchObject({
      type: { code: '110110' },
      subtype: [{ system: RESTFUL_INTERACTION, code: 'update' }],
      action: 'U',
      entity: [{ what: { reference: 'Observation/o-1' }, type: { code: 'Observation' } }],
    });
  });

  it('a write of more resources than listed says how many', () => {
    const event = build({
      kind: 'fhir-write',
      interaction: 'create',
      projectId: project,
      actor: client,
      references: ['Patient/a'],
      count: 5000,
    });
    expect(event.entity).toHaveLength(2);
    expect(event.entity?.[1]?.detail).toEqual([{ type: 'count', valueString: '5000' }]);
  });

  it('a search keeps its query base64 in entity.query and names the patients', () => {
    const event = build({
      kind: 'fhir-access',
      interaction: 'search-type',
      projectId: project,
      actor: client,
      resourceType: 'Observation',
      query: 'subject=Patient/p1&code=é',
      patientIds: ['p1', 'p2'],
    });
    expect(event).toMatchObject({
      type: { code: '110112' },
      action: 'E',
      subtype: [{ code: 'search-type' }],
    });
    const query = event.entity?.find((e) => e.query !== undefined);
    expect(Buffer.from(query!.query!, 'base64').toString('utf8')).toBe('subject=Patient/p1&code=é');
    expect(
      event.entity?.filter((e) => e.what?.reference?.startsWith('Patient/')).map((e) => e.what?.reference),
    ).toEqual(['Patient/p1', 'Patient/p2']);
  });

  it('an export carries its job, types, _since, Group and counts; a failure is serious', () => {
    const done = build({
      kind: 'export',
      phase: 'completed',
      projectId: project,
      actor: client,
      jobId: 'j-1',
      level: 'group',
      groupId: 'g-1',
      types: ['Patient'],
      since: '2026-01-01T00:00:00Z',
      counts: { Patient: 3 },
    });
    expect(done.entity?.[0]).toMatchObject({
      what: { identifier: { system: 'urn:fhir-platform-kit:export-job', value: 'j-1' } },
      detail: [
        { type: 'phase', valueString: 'completed' },
        { type: 'level', valueString: 'group' },
        { type: '_type', valueString: 'Patient' },
        { type: '_since', valueString: '2026-01-01T00:00:00Z' },
        { type: 'count:Patient', valueString: '3' },
      ],
    });
    expect(done.entity?.[1]?.what).toEqual({ reference: 'Group/g-1' });
    const failed = build({
      kind: 'export',
      phase: 'failed',
      projectId: project,
      actor: client,
      jobId: 'j',
      level: 'system',
      error: 'boom',
    });
    expect(failed).toMatchObject({ outcome: '8', outcomeDesc: 'boom', type: { code: '110106' } });
  });

  it('a download carries file, bytes and range', () => {
    const event = build({
      kind: 'download',
      projectId: project,
      actor: client,
      jobId: 'j-1',
      file: 'Patient-1.ndjson',
      bytes: 10,
      range: 'bytes=0-9',
    });
    expect(event).toMatchObject({ action: 'R', type: { code: '110106' } });
    expect(event.entity?.[0]?.detail).toEqual([
      { type: 'file', valueString: 'Patient-1.ndjson' },
      { type: 'bytes', valueString: '10' },
      { type: 'range', valueString: 'bytes=0-9' },
    ]);
  });

  it('a refused request is a Security Alert, minor failure, with status and the action of its method', () => {
    const event = build({
      kind: 'refused',
      status: 403,
      method: 'DELETE',
      path: '/fhir/R4/Patient/1',
      projectId: project,
      actor: client,
      reference: 'Patient/1',
    });
    expect(event).toMatchObject({
      type: { code: '110113' },
      subtype: [{ code: '110132' }],
      action: 'D',
      outcome: '4',
      entity: [
        { what: { reference: 'Patient/1' } },
        { description: 'DELETE /fhir/R4/Patient/1', detail: [{ type: 'status', valueString: '403' }] },
      ],
    });
    expect(
      build({
        kind: 'refused',
        status: 401,
        method: 'POST',
        path: '/fhir/R4/$export',
        projectId: null,
        actor: { kind: 'anonymous' },
      }).action,
    ).toBe('E');
  });

  it('scim and client events: user entity with profile; deactivation flagged', () => {
    const event = build({
      kind: 'scim-user',
      action: 'deactivate',
      projectId: project,
      actor: client,
      userId: 'u-9',
      profile: 'Patient/x',
    });
    expect(event).toMatchObject({
      action: 'U',
      subtype: [{ code: '110137' }, { code: 'update' }],
      entity: [
        {
          what: { reference: 'Patient/x', identifier: { value: 'u-9' } },
          detail: [{ type: 'active', valueString: 'false' }],
        },
      ],
    });
    const revoke = build({
      kind: 'client',
      action: 'revoke',
      projectId: project,
      actor: client,
      clientId: 'c-2',
    });
    expect(revoke).toMatchObject({ action: 'U', entity: [{ what: { identifier: { value: 'c-2' } } }] });
  });
});
