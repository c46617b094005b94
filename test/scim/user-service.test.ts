import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseScimFilter } from '../../src/scim/filter-parser.js';
import { USER_RESOURCE_SCHEMAS } from '../../src/scim/schema.js';
import { scimUserService } from '../../src/scim/user-service.js';
import { memoryStorage } from '../../src/stores.js';

async function service(echoUserName = false) {
  const storage = memoryStorage();
  await storage.createProject({ id: 'p', name: 'p', strictMode: false });
  const users = scimUserService({
    storage,
    schemas: USER_RESOURCE_SCHEMAS,
    echoUserName,
    maxOperations: 100,
    maxAttempts: 5,
  });
  return { storage, users };
}

const query = (filter: string) => ({
  filter: parseScimFilter(filter),
  descending: false,
  startIndex: 1,
  count: 1000,
});
const locationOf = (id: string) => `https://x/scim/v2/Users/${id}`;
const ids = (result: { resources: Record<string, unknown>[] }) =>
  result.resources.map((r) => r.id as string).sort();

describe('scimUserService search', () => {
  it('index lookups find exactly what a full scan finds', async () => {
    const { users } = await service();
    const names = ['ann', 'Bob', 'carl', 'Dora', 'eve'];
    for (const [i, name] of names.entries()) {
      await users.create('p', {
        userName: name,
        userType: 'Patient',
        externalId: i % 2 ? `ext-${name}` : undefined,
        active: i % 3 !== 0,
      });
    }
    const all = await users.search('p', { descending: false, startIndex: 1, count: 1000 }, locationOf);
    const profileIds = all.resources.map((r) => r.userName as string);
    const value = fc.oneof(
      fc.constantFrom(...names, ...names.map((n) => n.toUpperCase()), ...profileIds, 'nobody'),
      fc.constantFrom(...names.map((n) => `ext-${n}`), 'EXT-bob'),
      fc.constantFrom(...all.resources.map((r) => r.id as string)),
    );
    const leaf = fc
      .tuple(fc.constantFrom('userName', 'USERNAME', 'externalId', 'id'), value)
      .map(([attr, v]) => `${attr} eq ${JSON.stringify(v)}`);
    const filter = fc.oneof(
      leaf,
      fc.tuple(leaf, leaf).map(([a, b]) => `${a} or ${b}`),
      fc
        .tuple(leaf, fc.constantFrom('active eq true', 'active eq false', 'userType eq "patient"'))
        .map(([a, b]) => `${a} and ${b}`),
    );
    await fc.assert(
      fc.asyncProperty(filter, async (text) => {
        const planned = await users.search('p', query(text), locationOf);
        // `not (not (…))` defeats the planner: a full scan of the same filter.
        const scanned = await users.search('p', query(`not (not (${text}))`), locationOf);
        expect(ids(planned)).toEqual(ids(scanned));
        expect(planned.totalResults).toBe(scanned.totalResults);
      }),
      { numRuns: 150 },
    );
  });

  it('keeps the stored userName when a client writes back the profile id', async () => {
    const { users, storage } = await service();
    const created = await users.create('p', { userName: 'zed', userType: 'Practitioner' });
    const replaced = await users.replace('p', created.id, {
      userName: created.profileId,
      userType: 'Practitioner',
    });
    expect(replaced.userName).toBe('zed');
    expect((await storage.readUser('p', created.id)).userName).toBe('zed');
  });
});
