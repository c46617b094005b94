import fc from 'fast-check';
import { describe, expect, it, vi } from 'vitest';
import { parseScimAttributePath, parseScimFilter } from '../../src/scim/filter-parser.js';
import { resolveAttribute, USER_RESOURCE_SCHEMAS } from '../../src/scim/schema.js';
import { ScimPageCursors, scimStorageFilter, scimStorageSortKey } from '../../src/scim/user-listing.js';
import { scimUserService } from '../../src/scim/user-service.js';
import type { ScimListQuery } from '../../src/scim/list-query.js';
import { memoryStorage } from '../../src/stores.js';

const schemas = USER_RESOURCE_SCHEMAS;
const storageFilter = (text: string) => scimStorageFilter(parseScimFilter(text), schemas);
const sortKey = (path: string, echo = false) =>
  scimStorageSortKey(resolveAttribute(schemas, parseScimAttributePath(path))!, echo);
const locationOf = (id: string) => `https://x/scim/v2/Users/${id}`;

describe('scimStorageFilter', () => {
  it('pushes down the indexed comparisons, under and, or and emails[…]', () => {
    expect(storageFilter('externalId eq "E1"')).toEqual({ attribute: 'externalId', eq: 'E1' });
    expect(storageFilter('ID eq "u1"')).toEqual({ attribute: 'id', eq: 'u1' });
    expect(storageFilter('urn:ietf:params:scim:schemas:core:2.0:User:userName eq "Ann"')).toEqual({
      or: [
        { attribute: 'userName', eq: 'Ann' },
        { attribute: 'profileId', eq: 'Ann' },
      ],
    });
    expect(storageFilter('emails.value eq "a@x.org"')).toEqual({ attribute: 'email', eq: 'a@x.org' });
    expect(storageFilter('emails eq "a@x.org"')).toEqual({ attribute: 'email', eq: 'a@x.org' });
    expect(storageFilter('emails[type eq "work" and value eq "a@x.org"]')).toEqual({
      attribute: 'email',
      eq: 'a@x.org',
    });
    expect(storageFilter('emails[type eq "work"].value eq "a@x.org"')).toEqual({
      attribute: 'email',
      eq: 'a@x.org',
    });
    expect(storageFilter('active eq true')).toEqual({ attribute: 'active', eq: true });
    expect(storageFilter('active eq "False"')).toEqual({ attribute: 'active', eq: false });
    expect(storageFilter('externalId eq "a" and displayName co "x"')).toEqual({
      attribute: 'externalId',
      eq: 'a',
    });
    expect(storageFilter('externalId eq "a" or id eq "b"')).toEqual({
      or: [
        { attribute: 'externalId', eq: 'a' },
        { attribute: 'id', eq: 'b' },
      ],
    });
  });

  it('pushes down nothing it cannot answer from an index', () => {
    for (const text of [
      'externalId eq "a" or displayName eq "b"',
      'not (externalId eq "a")',
      'externalId ne "a"',
      'userName sw "a"',
      'emails.type eq "work"',
      'emails[type eq "work"]',
      'displayName eq "x"',
      'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:employeeNumber eq "1"',
      'externalId pr',
      'id eq 5',
    ])
      expect({ text, filter: storageFilter(text) }).toEqual({ text, filter: undefined });
  });
});

describe('scimStorageSortKey', () => {
  it('maps the attributes a store orders by, and only those', () => {
    expect(sortKey('userName')).toBe('profileId');
    expect(sortKey('USERNAME', true)).toBe('userName');
    expect(sortKey('id')).toBe('id');
    expect(sortKey('externalId')).toBe('externalId');
    expect(sortKey('meta.created')).toBe('createdAt');
    expect(sortKey('meta.lastModified')).toBe('updatedAt');
    for (const path of [
      'displayName',
      'name.familyName',
      'emails',
      'emails.value',
      'meta.location',
      'active',
    ])
      expect({ path, key: sortKey(path) }).toEqual({ path, key: undefined });
  });
});

describe('ScimPageCursors', () => {
  it('keeps positions by walk and startIndex, refreshes what is found, drops the oldest and the expired', () => {
    const cursors = new ScimPageCursors({ max: 2, ttlMs: 1000 });
    cursors.remember('w', 11, { cursor: { key: 'k', id: 'a' }, total: 5 }, 0);
    cursors.remember('v', 11, { cursor: { key: 'k', id: 'b' }, total: 5 }, 0);
    expect(cursors.find('w', 11, 10)).toEqual({ cursor: { key: 'k', id: 'a' }, total: 5 });
    expect(cursors.find('w', 12, 10)).toBeUndefined();
    cursors.remember('x', 1, { cursor: { key: null, id: 'c' }, total: 1 }, 10);
    // `v` was the least recently used.
    expect(cursors.find('v', 11, 10)).toBeUndefined();
    expect(cursors.find('w', 11, 1009)).toEqual({ cursor: { key: 'k', id: 'a' }, total: 5 });
    expect(cursors.find('x', 1, 1010)).toBeUndefined();
    expect(cursors.size).toBe(1);
  });
});

async function seeded(n: number, echoUserName = false) {
  const storage = memoryStorage();
  await storage.createProject({ id: 'p', name: 'p', strictMode: false });
  const users = scimUserService({ storage, schemas, echoUserName, maxOperations: 100, maxAttempts: 5 });
  for (let i = 0; i < n; i++) {
    await users.create('p', {
      userName: `User${(i * 7) % n}`,
      userType: 'Practitioner',
      displayName: `d${(i * 3) % n}`,
      ...(i % 3 ? { externalId: `ext${i}` } : {}),
      emails: [{ value: `u${i}@Example.org`, type: i % 2 ? 'work' : 'home' }],
      active: i % 4 !== 0,
    });
  }
  return { storage, users };
}

/** Every page of a SCIM list walk by `startIndex`, as an identity provider pages. */
async function walkScim(
  search: (q: ScimListQuery) => Promise<{ totalResults: number; resources: Record<string, unknown>[] }>,
  base: Omit<ScimListQuery, 'startIndex' | 'count'>,
  count: number,
): Promise<{ ids: string[]; totals: Set<number> }> {
  const ids: string[] = [];
  const totals = new Set<number>();
  for (let startIndex = 1; ; startIndex += count) {
    const page = await search({ ...base, startIndex, count });
    totals.add(page.totalResults);
    ids.push(...page.resources.map((r) => r.id as string));
    if (page.resources.length < count || startIndex + count > page.totalResults) return { ids, totals };
  }
}

describe('scimUserService search paging', () => {
  it('a walk by startIndex answers what one page of everything answers, in every order', async () => {
    const { users } = await seeded(23);
    const search = (q: ScimListQuery) => users.search('p', q, locationOf);
    const orders: Omit<ScimListQuery, 'startIndex' | 'count'>[] = [];
    for (const path of [undefined, 'userName', 'externalId', 'meta.created', 'displayName', 'id']) {
      for (const descending of [false, true]) {
        for (const filter of [
          undefined,
          'active eq true',
          'emails[type eq "work"]',
          'externalId pr or id eq "x"',
        ]) {
          orders.push({
            descending,
            ...(path ? { sortBy: resolveAttribute(schemas, parseScimAttributePath(path))! } : {}),
            ...(filter ? { filter: parseScimFilter(filter) } : {}),
          });
        }
      }
    }
    for (const base of orders) {
      const whole = await search({ ...base, startIndex: 1, count: 1000 });
      for (const count of [1, 4, 10]) {
        const walked = await walkScim(search, base, count);
        expect(walked.ids).toEqual(whole.resources.map((r) => r.id));
        expect([...walked.totals]).toEqual([whole.totalResults]);
      }
      // A page asked directly (no walk led there) is the same slice.
      const direct = await search({ ...base, startIndex: 6, count: 3 });
      expect(direct.resources.map((r) => r.id)).toEqual(whole.resources.slice(5, 8).map((r) => r.id));
    }
  });

  it('continues a walk from the previous page’s cursor, not from an offset', async () => {
    const { storage, users } = await seeded(30, true);
    const sortBy = resolveAttribute(schemas, parseScimAttributePath('userName'))!;
    const list = vi.spyOn(storage, 'listUsers');
    const walked = await walkScim((q) => users.search('p', q, locationOf), { descending: false, sortBy }, 7);
    expect(walked.ids).toHaveLength(30);
    const calls = list.mock.calls.map(([, options]) => options);
    expect(calls).toHaveLength(5);
    expect(calls[0]).toMatchObject({ sortBy: 'userName', offset: 0, count: 7 });
    for (const options of calls.slice(1)) {
      expect(options.after).toBeDefined();
      expect(options.offset).toBeUndefined();
      // The total was counted on the first page; the next ones read only themselves.
      expect(options.total).toBe(false);
    }
  });

  it('index lookups of emails, active and value paths find exactly what a full scan finds', async () => {
    const { users } = await seeded(12);
    const value = fc.constantFrom('u1@example.org', 'U2@EXAMPLE.ORG', 'u3@Example.org', 'nobody@x.org');
    const leaf = fc.oneof(
      value.map((v) => `emails.value eq ${JSON.stringify(v)}`),
      value.map((v) => `emails eq ${JSON.stringify(v)}`),
      fc
        .tuple(fc.constantFrom('work', 'home'), value)
        .map(([t, v]) => `emails[type eq "${t}" and value eq ${JSON.stringify(v)}]`),
      fc.constantFrom('active eq true', 'active eq false', 'externalId eq "ext2"'),
    );
    const filter = fc.oneof(
      leaf,
      fc.tuple(leaf, leaf).map(([a, b]) => `${a} or ${b}`),
      fc.tuple(leaf, leaf).map(([a, b]) => `${a} and ${b}`),
    );
    const ids = (r: { resources: Record<string, unknown>[] }) =>
      r.resources.map((u) => u.id as string).sort();
    await fc.assert(
      fc.asyncProperty(filter, async (text) => {
        const q = (f: string) => ({
          filter: parseScimFilter(f),
          descending: false,
          startIndex: 1,
          count: 1000,
        });
        const planned = await users.search('p', q(text), locationOf);
        const scanned = await users.search('p', q(`not (not (${text}))`), locationOf);
        expect(ids(planned)).toEqual(ids(scanned));
        expect(planned.totalResults).toBe(scanned.totalResults);
      }),
      { numRuns: 100 },
    );
  });
});
