// POST /.search at the SCIM server root (RFC 7644 §3.4.2.1, §3.4.3) on every store: the project's
// users and groups in one list, filtered, paged, sorted and projected across both types.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { expectScimError } from '../helpers/protocol-errors.js';
import { GROUP_SCHEMA, groupApp } from './group-app.js';

const USER_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:User';
const SEARCH_REQUEST = 'urn:ietf:params:scim:api:messages:2.0:SearchRequest';

type Listed = { id: string; displayName?: string; userName?: string; meta?: { resourceType: string } };

forEachStore('SCIM root search', (store, open) => {
  describe(`SCIM POST /.search (${store})`, () => {
    let storage: Storage;
    let t: Awaited<ReturnType<typeof groupApp>>;
    /** Users ada, bob, cy (in creation order) and groups Alpha (ada), Beta (ada, bob), Gamma. */
    let users: string[];
    let groups: string[];
    beforeEach(async () => {
      storage = await open();
      t = await groupApp(storage);
      users = [];
      for (const name of ['ada', 'bob', 'cy'])
        users.push((await t.user(name, { displayName: `${name} user` })).id);
      groups = [];
      for (const [name, members] of [
        ['Alpha', [users[0]!]],
        ['Beta', users.slice(0, 2)],
        ['Gamma', []],
      ] as const)
        groups.push((await t.group(name, [...members])).body.id as string);
    });
    afterEach(() => storage.close());

    const search = async (request: Record<string, unknown>) => {
      const res = await t.scim('post', '/.search', { schemas: [SEARCH_REQUEST], ...request });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
      expect(res.body.itemsPerPage).toBe(res.body.Resources.length);
      return res.body as { totalResults: number; startIndex: number; Resources: Listed[] };
    };
    const ids = async (request: Record<string, unknown>) =>
      (await search(request)).Resources.map((r) => r.id);

    it('lists the users in creation order, then the groups, and pages across both', async () => {
      const everything = [...users, ...[...groups].sort()];
      const all = await search({});
      expect(all.totalResults).toBe(6);
      expect(all.Resources.map((r) => r.id)).toEqual(everything);
      expect(all.Resources.map((r) => r.meta?.resourceType)).toEqual([
        ...['User', 'User', 'User'],
        ...['Group', 'Group', 'Group'],
      ]);
      const walked: string[] = [];
      for (let startIndex = 1; startIndex <= 7; startIndex += 2) {
        const page = await search({ startIndex, count: 2, attributes: ['id'] });
        expect(page).toMatchObject({ totalResults: 6, startIndex });
        walked.push(...page.Resources.map((r) => r.id));
      }
      expect(walked).toEqual(everything);
      expect(await ids({ startIndex: 3, count: 2 })).toEqual(everything.slice(2, 4));
      expect(await ids({ startIndex: 5, count: 10 })).toEqual(everything.slice(4));
      const counted = await search({ count: 0 });
      expect(counted).toMatchObject({ totalResults: 6, Resources: [] });
    });

    it('filters both types; attributes one type lacks are absent there', async () => {
      const sorted = (list: string[]) => [...list].sort();
      expect(await ids({ filter: 'meta.resourceType eq "Group"' })).toEqual(sorted(groups));
      expect(await ids({ filter: 'meta.resourceType eq "User"' })).toEqual(users);
      expect(await ids({ filter: 'members pr' })).toEqual(sorted(groups.slice(0, 2)));
      expect(await ids({ filter: `members.value eq "${users[1]}"` })).toEqual([groups[1]]);
      expect(await ids({ filter: 'userName eq "bob"' })).toEqual([users[1]]);
      expect(await ids({ filter: 'displayName sw "a"' })).toEqual([users[0], groups[0]]);
      expect(await ids({ filter: `userName eq "cy" or members[value eq "${users[1]}"]` })).toEqual([
        users[2],
        groups[1],
      ]);
      expect(await ids({ filter: 'not (members pr) and displayName co "a"' })).toEqual([users[0], groups[2]]);
      expect(await ids({ filter: 'members.value ne "nobody" and displayName eq "Gamma"' })).toEqual([
        groups[2],
      ]);
      const paged = await search({ filter: 'displayName co "e"', startIndex: 3, count: 2 });
      expect(paged.totalResults).toBe(4);
      expect(paged.Resources.map((r) => r.id)).toEqual([users[2], groups[1]]);
    });

    it('answers 400 invalidFilter for an attribute neither type defines', async () => {
      const filters = [
        'displayNmae eq "x"',
        'userName eq "x" or nonsense pr',
        'members[kind eq "User"]',
        'userName eq "x" and members[kind eq "User"]',
      ];
      for (const filter of filters)
        expectScimError(
          await t.scim('post', '/.search', { schemas: [SEARCH_REQUEST], filter }),
          400,
          'invalidFilter',
        );
    });

    it('sorts across both types, also by an attribute the selection leaves out', async () => {
      const byName = await search({ sortBy: 'displayName', attributes: ['displayName'] });
      expect(byName.Resources.map((r) => r.displayName)).toEqual([
        'ada user',
        'Alpha',
        'Beta',
        'bob user',
        'cy user',
        'Gamma',
      ]);
      const descending = await search({
        sortBy: 'displayName',
        sortOrder: 'descending',
        startIndex: 2,
        count: 3,
        attributes: ['id'],
      });
      expect(descending.totalResults).toBe(6);
      expect(descending.Resources).toEqual([
        { schemas: [USER_SCHEMA], id: users[2] },
        { schemas: [USER_SCHEMA], id: users[1] },
        { schemas: [GROUP_SCHEMA], id: groups[1] },
      ]);
      // A key only users have: the groups come last, in their own order.
      const byGivenName = await search({ sortBy: 'name.givenName', sortOrder: 'descending' });
      expect(byGivenName.Resources.map((r) => r.id)).toEqual([
        ...users.slice(0, 3).reverse(),
        ...[...groups].sort(),
      ]);
    });

    it("projects each resource with its own type's attributes, and keeps projects apart", async () => {
      const chosen = await search({
        filter: 'displayName sw "b"',
        attributes: ['name.givenName', 'members.value'],
      });
      expect(chosen.Resources).toEqual([
        { schemas: [USER_SCHEMA], id: users[1], name: { givenName: 'bob' } },
        {
          schemas: [GROUP_SCHEMA],
          id: groups[1],
          members: [{ value: users[0] }, { value: users[1] }],
        },
      ]);
      const other = await t.scim('post', '/.search', { schemas: [SEARCH_REQUEST] }, t.adminB);
      expect(other.body).toMatchObject({ totalResults: 0, Resources: [] });
    });
  });
});
