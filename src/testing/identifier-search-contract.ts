import { beforeEach, describe, expect, it, vi } from 'vitest';
import {
  compartmentSearch,
  identifierFilter,
  idFilter,
  lastUpdatedFilters,
  typeSearch,
  type ParameterFilter,
} from '../storage/search-request.js';
import type { IdentifierToken, Storage, StorageOperations, StoredResource } from '../storage/types.js';

/**
 * The identifier search part of the storage contract (an `identifier` filter of `ResourceQuery.search`,
 * answered from the identifier index): tokens of any
 * form, combined with the other filters, kept in step with writes. Called inside
 * `runStorageContract`, which makes a fresh store before each test.
 */
export function identifierSearchStorageContract(getStorage: () => Storage): void {
  describe('identifier search', () => {
    identifierMatchTests(getStorage);
    identifierWriteTests(getStorage);
  });
}

/** The token forms, and identifier search combined with the other narrowings. */
function identifierMatchTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });
  const ids = (tokens: IdentifierToken[], projectId = 'p1', ops: StorageOperations = storage) =>
    identifierMatches(ops, projectId, tokens);
  const seed = () => seedIdentifiers(storage);

  it('matches system|value, value, system| and |value on any identifier element', async () => {
    await seed();
    expect(await ids([{ system: 'urn:lab', value: '1' }])).toEqual(['o1']);
    expect(await ids([{ system: 'urn:mrn', value: '1' }])).toEqual(['o2']);
    // o4's `value: 1` is a number, not the string '1': no match.
    expect(await ids([{ value: '1' }])).toEqual(['o1', 'o2', 'o3']);
    expect(await ids([{ system: 'urn:lab' }])).toEqual(['o1', 'o2', 'o4']);
    expect(await ids([{ system: null, value: 'free' }])).toEqual(['o2']);
    expect(await ids([{ system: null, value: '1' }])).toEqual([]);
    expect(await ids([{ system: null }])).toEqual(['o2', 'o4']);
    expect(await ids([{ system: 'urn:lab', value: '3' }])).toEqual([]);
    expect(await ids([{ system: 'urn:a|b', value: 'c' }])).toEqual(['o6']);
    expect(await ids([{ system: 'urn:a', value: 'b|c' }])).toEqual(['o7']);
    // Tokens are ORed; a token with neither part matches nothing.
    expect(await ids([{ system: 'urn:other' }, { system: 'urn:lab', value: '2' }, {}])).toEqual(['o2', 'o3']);
    expect(await ids([])).toEqual([]);
    expect(await ids([{ system: 'urn:lab', value: '1' }], 'p2')).toEqual(['o1']);
    expect(await ids([{ system: 'urn:lab', value: '1' }], 'p3')).toEqual([]);
  });

  it('combines with ids, compartment, lastUpdated, where, sort and paging', async () => {
    await seed();
    const lab = identifierFilter([{ system: 'urn:lab' }]);
    const search = (extra: object, filters: ParameterFilter[] = [], compartment?: string[]) =>
      storage.searchResources('p1', 'Observation', {
        search: compartment
          ? compartmentSearch('Observation', compartment, [lab, ...filters])
          : typeSearch('Observation', [lab, ...filters]),
        sort: '_id',
        ...extra,
      });
    expect((await search({}, [idFilter(['o2', 'o3', 'o4'])])).resources.map((r) => r.id)).toEqual([
      'o2',
      'o4',
    ]);
    expect((await search({}, [], ['a'])).total).toBe(3);
    expect((await search({}, [], ['b'])).total).toBe(0);
    expect((await search({}, lastUpdatedFilters({ ge: Date.now() + 60_000 }))).total).toBe(0);
    expect(
      (await search({ where: (r: StoredResource) => r.id !== 'o1' })).resources.map((r) => r.id),
    ).toEqual(['o2', 'o4']);
    const page = await search({ sort: '-_id', offset: 1, count: 1 });
    expect(page.total).toBe(3);
    expect(page.resources.map((r) => r.id)).toEqual(['o2']);
    expect(await search({ count: 0 })).toEqual({ total: 3, resources: [] });
  });
}

/** Matches follow updates and deletes; identifiers of any length; an index, not a scan. */
function identifierWriteTests(getStorage: () => Storage): void {
  let storage: Storage;
  beforeEach(() => {
    storage = getStorage();
  });
  const ids = (tokens: IdentifierToken[], projectId = 'p1', ops: StorageOperations = storage) =>
    identifierMatches(ops, projectId, tokens);
  const seed = () => seedIdentifiers(storage);

  it('follows updates and deletes, in transactions too', async () => {
    await seed();
    // An update that changes the identifiers: the old keys stop matching, the new ones match.
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'o1',
      identifier: [{ system: 'urn:lab', value: '9' }],
    });
    expect(await ids([{ system: 'urn:lab', value: '1' }])).toEqual([]);
    expect(await ids([{ system: 'urn:lab', value: '9' }])).toEqual(['o1']);
    // An update that drops them.
    await storage.updateResource('p1', { resourceType: 'Observation', id: 'o2' });
    expect(await ids([{ system: 'urn:mrn', value: '1' }])).toEqual([]);
    expect(await ids([{ system: 'urn:lab' }])).toEqual(['o1', 'o4']);
    await storage.deleteResource('p1', 'Observation', 'o4');
    expect(await ids([{ system: 'urn:lab' }])).toEqual(['o1']);
    // Re-created after its delete, with another identifier.
    await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'o4',
      identifier: { system: 'urn:new', value: 'x' },
    });
    expect(await ids([{ value: 'x' }])).toEqual(['o4']);
    // Several versions of one resource in one batch: only the last one counts.
    await storage.writeResources('p1', [
      {
        op: 'update',
        resource: { resourceType: 'Observation', id: 'o8', identifier: [{ value: 'v1' }] },
      },
      {
        op: 'update',
        resource: { resourceType: 'Observation', id: 'o8', identifier: [{ value: 'v2' }] },
      },
      {
        op: 'update',
        resource: { resourceType: 'Observation', id: 'o9', identifier: [{ value: 'v1' }] },
      },
      { op: 'delete', resourceType: 'Observation', id: 'o9' },
    ]);
    expect(await ids([{ value: 'v1' }, { value: 'v2' }])).toEqual(['o8']);
    // Inside a transaction: its own writes are seen through tx only, and rolled back on throw.
    await expect(
      storage.transaction(async (tx) => {
        await tx.updateResource('p1', {
          resourceType: 'Observation',
          id: 'o1',
          identifier: [{ value: 'tx' }],
        });
        await tx.deleteResource('p1', 'Observation', 'o4');
        expect(await ids([{ value: 'tx' }], 'p1', tx)).toEqual(['o1']);
        expect(await ids([{ system: 'urn:lab', value: '9' }], 'p1', tx)).toEqual([]);
        expect(await ids([{ value: 'x' }], 'p1', tx)).toEqual([]);
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await ids([{ value: 'tx' }])).toEqual([]);
    expect(await ids([{ system: 'urn:lab', value: '9' }])).toEqual(['o1']);
    expect(await ids([{ value: 'x' }])).toEqual(['o4']);
    await storage.createProject({ id: 'p1', name: 'P', strictMode: false });
    await storage.deleteProject('p1');
    expect(await ids([{ value: 'x' }])).toEqual([]);
  });

  it('finds identifiers of any length and characters', async () => {
    const long = 'x'.repeat(5000);
    const values = ['a\u0000b', `${long}1`, `${long}2`, 'é€😀', ' '];
    await storage.writeResources(
      'p1',
      values.map((value, i) => ({
        op: 'create' as const,
        resource: {
          resourceType: 'Observation',
          id: `o${i}`,
          identifier: [{ system: `urn:${value}`, value }],
        },
      })),
    );
    for (const [i, value] of values.entries()) {
      expect(await ids([{ value }])).toEqual([`o${i}`]);
      expect(await ids([{ system: `urn:${value}`, value }])).toEqual([`o${i}`]);
      expect(await ids([{ system: `urn:${value}` }])).toEqual([`o${i}`]);
    }
    expect(await ids([{ value: 'a' }, { value: long }, { value: '' }])).toEqual([]);
  });

  it('reads only the matching resources (an index, not a scan of the type)', async () => {
    const writes = [];
    for (let i = 0; i < 600; i++) {
      writes.push({
        op: 'create' as const,
        resource: {
          resourceType: 'Observation',
          id: `o${i}`,
          identifier: [{ system: 'urn:lab', value: String(i) }],
        },
      });
    }
    await storage.writeResources('p1', writes);
    const parse = vi.spyOn(JSON, 'parse');
    try {
      expect(await ids([{ system: 'urn:lab', value: '42' }, { value: '7' }])).toEqual(['o42', 'o7']);
      // One parse per resource read (a scan would parse all 600).
      expect(parse.mock.calls.length).toBeLessThanOrEqual(2);
    } finally {
      parse.mockRestore();
    }
  });
}

/** Ids of the matches of `tokens` (ORed), by id. */
async function identifierMatches(ops: StorageOperations, projectId: string, tokens: IdentifierToken[]) {
  const search = typeSearch('Observation', [identifierFilter(tokens)]);
  const page = await ops.searchResources(projectId, 'Observation', { search, sort: '_id' });
  expect(page.total).toBe(page.resources.length);
  return page.resources.map((r) => r.id);
}

/** Observations of p1 with identifiers of every shape, and resources that must never match. */
async function seedIdentifiers(storage: Storage): Promise<void> {
  const observation = (id: string, identifier: unknown) => ({
    resourceType: 'Observation',
    id,
    ...(identifier === undefined ? {} : { identifier }),
    subject: { reference: 'Patient/a' },
  });
  await storage.writeResources('p1', [
    { op: 'create', resource: observation('o1', [{ system: 'urn:lab', value: '1' }]) },
    // Several identifiers per resource; one of them without a system.
    {
      op: 'create',
      resource: observation('o2', [
        { system: 'urn:lab', value: '2' },
        { system: 'urn:mrn', value: '1' },
        { value: 'free' },
      ]),
    },
    // A single identifier object (not an array), and one with a system but no value.
    { op: 'create', resource: observation('o3', { system: 'urn:other', value: '1' }) },
    { op: 'create', resource: observation('o4', [{ system: 'urn:lab' }, { value: 1 }]) },
    { op: 'create', resource: observation('o5', undefined) },
    // Parts that would run together if keys were plain concatenations.
    { op: 'create', resource: observation('o6', [{ system: 'urn:a|b', value: 'c' }]) },
    { op: 'create', resource: observation('o7', [{ system: 'urn:a', value: 'b|c' }]) },
  ]);
  // Other types and projects never match.
  await storage.createResource('p1', {
    resourceType: 'Patient',
    id: 'a',
    identifier: [{ system: 'urn:lab', value: '1' }],
  });
  await storage.createResource('p2', observation('o1', [{ system: 'urn:lab', value: '1' }]));
}
