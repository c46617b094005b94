import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { applyScimPatch, type ScimPatchOperation } from '../../src/scim/patch.js';
import { CORE_USER_SCHEMA_ID, ENTERPRISE_USER_SCHEMA_ID, PATCH_OP_SCHEMA_ID } from '../../src/scim/schema.js';
import { ScimError } from '../../src/http/http-error.js';

function base(): Record<string, unknown> {
  return {
    schemas: [CORE_USER_SCHEMA_ID],
    id: 'u1',
    userName: 'bjensen',
    userType: 'Patient',
    active: true,
    name: { givenName: 'Barbara', familyName: 'Jensen' },
    emails: [{ value: 'b@example.org', type: 'work', primary: true }],
    meta: { resourceType: 'User', created: '2024-01-01T00:00:00Z' },
  };
}

function patch(resource: Record<string, unknown>, ...Operations: unknown[]) {
  return applyScimPatch(resource, { schemas: [PATCH_OP_SCHEMA_ID], Operations });
}

function failure(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ScimError);
    expect((err as ScimError).status).toBe(400);
    return (err as ScimError).scimType;
  }
  return 'no error';
}

describe('applyScimPatch', () => {
  it('replaces without a path (Okta deactivate) and never touches its input', () => {
    const input = base();
    const before = JSON.stringify(input);
    const out = patch(input, { op: 'replace', value: { active: false } });
    expect(out.active).toBe(false);
    expect(JSON.stringify(input)).toBe(before);
  });

  it('accepts Entra capitalised ops, string booleans and dotted path-less keys', () => {
    const out = patch(
      base(),
      { op: 'Replace', path: 'active', value: 'False' },
      { op: 'Replace', value: { 'name.givenName': 'Babs', displayName: 'Babs J' } },
      { op: 'Add', path: 'emails[type eq "work"].primary', value: 'True' },
    );
    expect(out.active).toBe(false);
    expect(out.name).toEqual({ givenName: 'Babs', familyName: 'Jensen' });
    expect(out.displayName).toBe('Babs J');
    expect((out.emails as { primary: unknown }[])[0]!.primary).toBe(true);
  });

  it('accepts value-path keys in a path-less value (Entra)', () => {
    const out = patch(base(), {
      op: 'Add',
      value: {
        'emails[type eq "work"].value': 'w2@example.org',
        'emails[type eq "home"].value': 'h@example.org',
      },
    });
    expect(out.emails).toEqual([
      { value: 'w2@example.org', type: 'work', primary: true },
      { type: 'home', value: 'h@example.org' },
    ]);
  });

  it('creates a missing entry for a value-path add or replace', () => {
    const out = patch(base(), { op: 'Add', path: 'emails[type eq "home"].value', value: 'h@example.org' });
    expect(out.emails).toEqual([
      { value: 'b@example.org', type: 'work', primary: true },
      { type: 'home', value: 'h@example.org' },
    ]);
    const replaced = patch(base(), {
      op: 'replace',
      path: 'emails[type eq "work"].value',
      value: 'new@example.org',
    });
    expect(replaced.emails).toEqual([{ value: 'new@example.org', type: 'work', primary: true }]);
    const none = { ...base(), emails: undefined };
    expect(
      patch(none, { op: 'replace', path: 'emails[type eq "work"].value', value: 'w@x.org' }).emails,
    ).toEqual([{ type: 'work', value: 'w@x.org' }]);
  });

  it('answers noTarget for a value-path replace that cannot be created', () => {
    expect(
      failure(() => patch(base(), { op: 'replace', path: 'emails[value co "zzz"].type', value: 'home' })),
    ).toBe('noTarget');
  });

  it('adds to multi-valued attributes without duplicates and keeps one primary', () => {
    const out = patch(base(), {
      op: 'add',
      path: 'emails',
      value: [
        { value: 'b@example.org', type: 'work', primary: true },
        { value: 'c@example.org', type: 'other', primary: true },
      ],
    });
    expect(out.emails).toEqual([
      { value: 'b@example.org', type: 'work', primary: false },
      { value: 'c@example.org', type: 'other', primary: true },
    ]);
  });

  it('removes with paths and value filters', () => {
    expect(patch(base(), { op: 'remove', path: 'name.givenName' }).name).toEqual({ familyName: 'Jensen' });
    expect(patch(base(), { op: 'remove', path: 'emails[type eq "work"]' }).emails).toBeUndefined();
    expect(patch(base(), { op: 'remove', path: 'emails[type eq "home"]' }).emails).toHaveLength(1);
    expect(patch(base(), { op: 'remove', path: 'displayName' })).not.toHaveProperty('displayName');
    expect(
      patch(base(), { op: 'remove', path: 'emails', value: [{ value: 'B@EXAMPLE.ORG' }] }).emails,
    ).toBeUndefined();
  });

  it('unassigns a removed single-valued attribute (remove, or a null value); what cannot go is a 400', () => {
    // The engine leaves `active` unassigned; the user service gives it its default (true).
    for (const op of [
      { op: 'remove', path: 'active' },
      { op: 'replace', path: 'active', value: null },
      { op: 'replace', value: { active: null } },
    ]) {
      expect(patch({ ...base(), active: false }, op)).not.toHaveProperty('active');
    }
    expect(patch({ ...base(), externalId: 'x' }, { op: 'remove', path: 'externalId' })).not.toHaveProperty(
      'externalId',
    );
    expect(failure(() => patch(base(), { op: 'remove', path: 'userType' }))).toBe('mutability');
    expect(failure(() => patch(base(), { op: 'remove', path: 'id' }))).toBe('mutability');
    expect(failure(() => patch(base(), { op: 'remove', path: 'meta.created' }))).toBe('mutability');
    // A required value missing (RFC 7644 §3.12).
    expect(failure(() => patch(base(), { op: 'remove', path: 'userName' }))).toBe('invalidValue');
  });

  it('handles the enterprise extension, including Entra manager strings', () => {
    const out = patch(
      base(),
      { op: 'Add', path: `${ENTERPRISE_USER_SCHEMA_ID}:manager`, value: 'boss-1' },
      { op: 'replace', value: { [`${ENTERPRISE_USER_SCHEMA_ID}:department`]: 'Cardio' } },
      { op: 'add', value: { [ENTERPRISE_USER_SCHEMA_ID]: { employeeNumber: '42' } } },
    );
    expect(out[ENTERPRISE_USER_SCHEMA_ID]).toEqual({
      manager: { value: 'boss-1' },
      department: 'Cardio',
      employeeNumber: '42',
    });
    const removed = patch(
      out,
      { op: 'Remove', path: `${ENTERPRISE_USER_SCHEMA_ID}:manager` },
      { op: 'remove', path: `${ENTERPRISE_USER_SCHEMA_ID}:department` },
      { op: 'remove', path: `${ENTERPRISE_USER_SCHEMA_ID}:employeeNumber` },
    );
    expect(removed).not.toHaveProperty([ENTERPRISE_USER_SCHEMA_ID]);
  });

  it.each<[string, unknown[]]>([
    ['noTarget', [{ op: 'remove' }]],
    ['invalidPath', [{ op: 'replace', path: 'nosuch', value: 1 }]],
    ['invalidPath', [{ op: 'replace', path: 'name.nosuch', value: 1 }]],
    ['invalidPath', [{ op: 'replace', path: 'emails[type eq "work"', value: 1 }]],
    ['invalidPath', [{ op: 'replace', path: 'name[givenName eq "x"]', value: 1 }]],
    ['mutability', [{ op: 'replace', path: 'id', value: 'other' }]],
    ['mutability', [{ op: 'replace', value: { id: 'other' } }]],
    ['mutability', [{ op: 'replace', path: 'userType', value: 'Practitioner' }]],
    ['mutability', [{ op: 'remove', path: 'userType' }]],
    ['mutability', [{ op: 'replace', path: 'meta.created', value: '2020-01-01T00:00:00Z' }]],
    ['mutability', [{ op: 'replace', value: { meta: { created: '2020-01-01T00:00:00Z' } } }]],
    ['invalidValue', [{ op: 'replace', path: 'active', value: 'maybe' }]],
    ['invalidValue', [{ op: 'remove', path: 'userName' }]],
    ['invalidValue', [{ op: 'replace', value: 'x' }]],
    ['invalidSyntax', [{ op: 'move', path: 'active', value: true }]],
    ['invalidSyntax', []],
  ])('answers %s', (expected, operations) => {
    expect(failure(() => patch(base(), ...operations))).toBe(expected);
  });

  it('allows writing the value an immutable attribute already has', () => {
    expect(patch(base(), { op: 'replace', value: { id: 'u1', userType: 'patient' } }).userType).toBe(
      'Patient',
    );
  });

  it('requires the PatchOp schema and an Operations array', () => {
    expect(failure(() => applyScimPatch(base(), { Operations: [{ op: 'add', value: {} }] }))).toBe(
      'invalidSyntax',
    );
    expect(failure(() => applyScimPatch(base(), { schemas: [PATCH_OP_SCHEMA_ID] }))).toBe('invalidSyntax');
    expect(failure(() => applyScimPatch(base(), []))).toBe('invalidSyntax');
  });

  it('is atomic: a failing operation leaves nothing changed', () => {
    const input = base();
    const before = JSON.stringify(input);
    expect(
      failure(() =>
        patch(
          input,
          { op: 'replace', path: 'active', value: false },
          { op: 'replace', path: 'id', value: 'x' },
        ),
      ),
    ).toBe('mutability');
    expect(JSON.stringify(input)).toBe(before);
  });

  it.each<[unknown]>([
    [{ op: 'add', path: '__proto__.polluted', value: 'x' }],
    [{ op: 'add', path: 'constructor.prototype.polluted', value: 'x' }],
    [{ op: 'add', path: 'name.__proto__', value: { polluted: 'x' } }],
    [{ op: 'add', value: { '__proto__.polluted': 'x' } }],
    [{ op: 'add', value: JSON.parse('{"__proto__": {"polluted": "x"}}') }],
    [{ op: 'add', value: { name: JSON.parse('{"__proto__": {"polluted": "x"}}') } }],
    [{ op: 'add', value: { 'constructor.prototype.polluted': 'x' } }],
    [{ op: 'add', path: 'emails[type eq "work"].__proto__', value: 'x' }],
    [{ op: 'replace', path: 'toString.polluted', value: 'x' }],
  ])('rejects prototype paths and keys: %j', (operation) => {
    const input = base();
    const before = JSON.stringify(input);
    const type = failure(() => patch(input, operation));
    expect(['invalidPath', 'invalidValue']).toContain(type);
    expect(JSON.stringify(input)).toBe(before);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((Object.prototype.toString as unknown as Record<string, unknown>).polluted).toBeUndefined();
  });
});

const pathArb = fc.oneof(
  fc.constantFrom(
    'active',
    'userName',
    'name.givenName',
    'emails',
    'emails.value',
    'emails[type eq "work"].value',
    'emails[type eq "work"]',
    `${ENTERPRISE_USER_SCHEMA_ID}:manager`,
    ENTERPRISE_USER_SCHEMA_ID,
    '__proto__',
    'constructor.prototype',
    'name.__proto__.x',
    'toString',
    'hasOwnProperty.x',
    'id',
    'meta',
  ),
  fc.string({ maxLength: 20 }),
);
const keyArb = fc.oneof(
  fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'value', 'type'),
  fc.string(),
);
const valueArb = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small' },
    fc.jsonValue({ maxDepth: 2 }),
    fc.dictionary(keyArb, tie('value'), { maxKeys: 3 }),
    fc.array(tie('value'), { maxLength: 3 }),
  ),
})).value;
const operationArb: fc.Arbitrary<ScimPatchOperation> = fc.record(
  {
    op: fc.constantFrom('add', 'Add', 'replace', 'REPLACE', 'remove', 'bogus'),
    path: pathArb,
    value: valueArb,
  },
  { requiredKeys: ['op'] },
);

describe('PATCH properties', () => {
  it('never pollutes prototypes, never mutates its input, and fails only with ScimError 400', () => {
    fc.assert(
      fc.property(fc.array(operationArb, { minLength: 1, maxLength: 4 }), (operations) => {
        const input = base();
        const before = JSON.stringify(input);
        try {
          const out = patch(input, ...operations);
          expect(out.id).toBe('u1');
          expect(out.userType).toBe('Patient');
        } catch (err) {
          expect(err).toBeInstanceOf(ScimError);
          expect((err as ScimError).status).toBe(400);
        }
        expect(JSON.stringify(input)).toBe(before);
        expect(Object.getOwnPropertyNames(Object.prototype)).not.toContain('polluted');
        for (const key of Object.keys(Object.prototype)) throw new Error(`Object.prototype gained ${key}`);
      }),
      { numRuns: 1000 },
    );
  });

  it('is atomic: a batch with a failing operation returns an error and no partial result', () => {
    fc.assert(
      fc.property(fc.array(operationArb, { maxLength: 3 }), (operations) => {
        const input = base();
        const before = JSON.stringify(input);
        expect(() => patch(input, ...operations, { op: 'remove' })).toThrow(ScimError);
        expect(JSON.stringify(input)).toBe(before);
      }),
      { numRuns: 300 },
    );
  });
});
