import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseScimFilter } from '../../src/scim/filter-parser.js';
import { compileScimFilter, matchesScimFilter, planScimLookup } from '../../src/scim/filter-evaluator.js';
import { CORE_USER_SCHEMA_ID, USER_RESOURCE_SCHEMAS } from '../../src/scim/schema.js';
import { ScimError } from '../../src/http/http-error.js';

const user = {
  schemas: [CORE_USER_SCHEMA_ID, 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User'],
  id: 'Ab12',
  externalId: 'Ext-1',
  userName: 'Barbara.Jensen@example.org',
  userType: 'Practitioner',
  active: true,
  name: { givenName: 'Barbara', familyName: 'Jensen' },
  emails: [
    { value: 'bjensen@example.org', type: 'work', primary: true },
    { value: 'babs@jensen.org', type: 'home' },
  ],
  meta: { created: '2024-01-02T03:04:05Z', lastModified: '2024-06-01T00:00:00.000Z', resourceType: 'User' },
  'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User': {
    department: 'Cardiology',
    manager: { value: 'm1' },
  },
};

function match(filter: string, resource: unknown = user): boolean {
  return matchesScimFilter(parseScimFilter(filter), resource, USER_RESOURCE_SCHEMAS);
}

describe('filter evaluation', () => {
  it('follows caseExact per attribute and case-insensitive names', () => {
    expect(match('userName eq "barbara.jensen@EXAMPLE.org"')).toBe(true);
    expect(match('USERNAME EQ "barbara.jensen@example.org"')).toBe(true);
    expect(match('externalId eq "ext-1"')).toBe(false);
    expect(match('externalId eq "Ext-1"')).toBe(true);
    expect(match('id eq "ab12"')).toBe(false);
    expect(match('name.givenName sw "bar"')).toBe(true);
    expect(match('name.familyName ew "SEN"')).toBe(true);
    expect(match('displayName co "x"')).toBe(false);
  });

  it('matches any value of a multi-valued attribute, and value paths within one value', () => {
    expect(match('emails co "jensen.org"')).toBe(true);
    expect(match('emails.value eq "BABS@jensen.org"')).toBe(true);
    expect(match('emails[type eq "work" and value co "@example.org"]')).toBe(true);
    expect(match('emails[type eq "home" and value co "@example.org"]')).toBe(false);
    expect(match('emails[type eq "work"].value eq "bjensen@example.org"')).toBe(true);
    expect(match('emails[type eq "work"].value eq "babs@jensen.org"')).toBe(false);
    expect(match('emails.primary eq true')).toBe(true);
  });

  it('compares dateTimes as instants and booleans by value', () => {
    expect(match('meta.lastModified gt "2024-05-31T23:59:59Z"')).toBe(true);
    expect(match('meta.lastModified eq "2024-06-01T00:00:00Z"')).toBe(true);
    expect(match('meta.created lt "2024-01-02T03:04:05.001Z"')).toBe(true);
    expect(match('meta.created ge "2025-01-01T00:00:00Z"')).toBe(false);
    expect(match('active eq true')).toBe(true);
    expect(match('active eq false')).toBe(false);
    expect(match('active ne false')).toBe(true);
  });

  it('evaluates logic, presence, extensions and fully qualified names', () => {
    expect(match('title pr')).toBe(false);
    expect(match('not (title pr) and userType eq "practitioner"')).toBe(true);
    expect(match('userName eq "x" or name.givenName eq "Barbara"')).toBe(true);
    expect(match('urn:ietf:params:scim:schemas:core:2.0:User:userName sw "Barb"')).toBe(true);
    expect(
      match('urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:department eq "cardiology"'),
    ).toBe(true);
    expect(match('urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager.value eq "m1"')).toBe(
      true,
    );
    expect(match('department eq "Cardiology"')).toBe(true);
    expect(match('title eq null')).toBe(true);
    expect(match('userName ne null')).toBe(true);
  });

  it.each([
    ['active gt true'],
    ['active co "t"'],
    ['meta.created gt "yesterday"'],
    ['meta.created eq 5'],
    ['name eq "Barbara"'],
    ['userName gt null'],
    ['userName eq true'],
    // Attributes the schemas do not define: a misspelt name must not match nothing.
    ['userNmae eq "x"'],
    ['unknownAttribute ne "x"'],
    ['name.nickname eq "x"'],
    ['emails[kind eq "work"]'],
    ['nonsense pr'],
    ['urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:userName eq "x"'],
  ])('rejects %j as invalidFilter at compile time', (filter) => {
    expect(() => compileScimFilter(parseScimFilter(filter), USER_RESOURCE_SCHEMAS)).toThrow(ScimError);
  });

  it('never throws on arbitrary users', () => {
    const filters = [
      'userName eq "a"',
      'emails[type eq "work"].value co "a"',
      'meta.created gt "2020-01-01T00:00:00Z"',
      'active eq true',
      'name.givenName pr and not (emails.value sw "x")',
      'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager.value eq "1"',
    ].map((f) => compileScimFilter(parseScimFilter(f), USER_RESOURCE_SCHEMAS));
    fc.assert(
      fc.property(
        fc.oneof(fc.jsonValue(), fc.object()),
        fc.dictionary(fc.string(), fc.jsonValue()),
        (anything, dict) => {
          for (const predicate of filters) {
            expect(typeof predicate(anything)).toBe('boolean');
            expect(typeof predicate({ ...dict, emails: anything, meta: anything, name: anything })).toBe(
              'boolean',
            );
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('filters at the server root (undefinedAsAbsent)', () => {
  const rootMatch = (filter: string, resource: unknown = user) =>
    compileScimFilter(parseScimFilter(filter), USER_RESOURCE_SCHEMAS, { undefinedAsAbsent: true })(resource);

  it('reads an attribute the schemas lack as one without a value (RFC 7644 §3.4.2.1)', () => {
    expect(rootMatch('members pr')).toBe(false);
    expect(rootMatch('members.value eq "Ab12"')).toBe(false);
    expect(rootMatch('members[value eq "Ab12"]')).toBe(false);
    expect(rootMatch('members.value ne "Ab12"')).toBe(true);
    expect(rootMatch('members eq null')).toBe(true);
    expect(rootMatch('members ne null')).toBe(false);
    expect(rootMatch('not (members pr)')).toBe(true);
    expect(rootMatch('members.value eq "Ab12" or userName sw "barbara"')).toBe(true);
    expect(rootMatch('members.value gt true and userName sw "barbara"')).toBe(false);
  });

  it.each([
    ['members gt null'],
    ['name.givenName gt true'],
    ['emails[kind eq "work"]'],
    ['userName eq true'],
  ])('still rejects %j, whose attribute the schemas define or whose operator never applies', (filter) => {
    const compile = () =>
      compileScimFilter(parseScimFilter(filter), USER_RESOURCE_SCHEMAS, { undefinedAsAbsent: true });
    expect(compile).toThrow(ScimError);
  });
});

describe('planScimLookup', () => {
  const plan = (f: string) => planScimLookup(parseScimFilter(f), CORE_USER_SCHEMA_ID);
  it('finds indexed lookups', () => {
    expect(plan('userName eq "a"')).toEqual([{ attribute: 'userName', value: 'a' }]);
    expect(plan('UserName eq "a" and active eq true')).toEqual([{ attribute: 'userName', value: 'a' }]);
    expect(plan('active eq true and externalId eq "e"')).toEqual([{ attribute: 'externalId', value: 'e' }]);
    expect(plan('externalId eq "e" or id eq "i"')).toEqual([
      { attribute: 'externalId', value: 'e' },
      { attribute: 'id', value: 'i' },
    ]);
    expect(plan('urn:ietf:params:scim:schemas:core:2.0:User:userName eq "a"')).toEqual([
      { attribute: 'userName', value: 'a' },
    ]);
  });
  it('falls back to a scan otherwise', () => {
    expect(plan('userName sw "a"')).toBeUndefined();
    expect(plan('userName eq "a" or active eq true')).toBeUndefined();
    expect(plan('not (userName eq "a")')).toBeUndefined();
    expect(plan('name.givenName eq "a"')).toBeUndefined();
  });
  it('plans no lookup for attributes named like Object.prototype properties', () => {
    for (const name of ['constructor', 'toString', 'valueOf', 'hasOwnProperty', 'isPrototypeOf']) {
      expect(plan(`${name} eq "a"`)).toBeUndefined();
    }
    expect(
      planScimLookup(
        { type: 'compare', path: { attribute: '__proto__' }, operator: 'eq', value: 'a' },
        CORE_USER_SCHEMA_ID,
      ),
    ).toBeUndefined();
  });
});
