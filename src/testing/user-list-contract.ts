import { beforeEach, describe, expect, it } from 'vitest';
import type { Storage, UserListOptions, UserRecord, UserSortKey } from '../storage/types.js';
import { newUser, rejectsWith } from './contract-helpers.js';

const INVALID = 'ERR_STORAGE_INVALID';

const SORT_KEYS: UserSortKey[] = ['createdAt', 'updatedAt', 'userName', 'profileId', 'externalId', 'id'];

/** The contract's order, written out independently of the adapters: key (missing last), then id. */
function referenceOrder(users: UserRecord[], sortBy: UserSortKey, descending: boolean): string[] {
  const key = (u: UserRecord): string | undefined =>
    sortBy === 'userName' ? u.userName.toLowerCase() : sortBy === 'externalId' ? u.externalId : u[sortBy];
  const sign = descending ? -1 : 1;
  return [...users]
    .sort((a, b) => {
      const x = key(a);
      const y = key(b);
      if (x === undefined || y === undefined) {
        if (x !== y) return x === undefined ? 1 : -1;
      } else if (x !== y) return sign * (x < y ? -1 : 1);
      return sign * (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
    })
    .map((u) => u.id);
}

/** Every page of a listing, following `next`; checks each page's total and size. */
async function walk(storage: Storage, projectId: string, options: UserListOptions): Promise<string[]> {
  const ids: string[] = [];
  let after = options.after;
  for (let pages = 0; pages < 100; pages++) {
    const page = await storage.listUsers(projectId, { ...options, ...(after ? { after } : {}) });
    expect(page.users.length).toBeLessThanOrEqual(options.count);
    ids.push(...page.users.map((u) => u.id));
    if (!page.next) return ids;
    expect(page.users).toHaveLength(options.count);
    after = page.next;
  }
  throw new Error('the walk does not end');
}

/** The userNames of p1's users, in creation order. */
const NAMES = ['delta', 'Alpha', 'charlie', 'Bravo', 'echo', 'ALPHA2', 'foxtrot', 'golf', 'Hotel', 'india'];

/**
 * The paged `listUsers(projectId, options)` of the storage contract: order, filters, `where`,
 * keyset cursors and offsets. Called inside `runStorageContract`.
 */
export function userListStorageContract(getStorage: () => Storage): void {
  describe('paged listUsers', () => {
    const seeded = seededUsers(getStorage);
    userOrderTests(seeded);
    userFilterTests(seeded);
    userPositionTests(seeded);
  });
}

/** Every sort key in both orders, pages without a total, the default order. */
function userOrderTests(seeded: SeededUsers): void {
  let storage: Storage;
  let users: UserRecord[];
  beforeEach(() => {
    ({ storage, users } = seeded);
  });

  it('walks every sort key, both orders, page by page, in the contract order', async () => {
    for (const sortBy of SORT_KEYS) {
      for (const sortOrder of ['ascending', 'descending'] as const) {
        const expected = referenceOrder(users, sortBy, sortOrder === 'descending');
        for (const count of [1, 3, 10, 50]) {
          expect({
            sortBy,
            sortOrder,
            count,
            ids: await walk(storage, 'p1', { sortBy, sortOrder, count }),
          }).toEqual({ sortBy, sortOrder, count, ids: expected });
        }
        const first = await storage.listUsers('p1', { sortBy, sortOrder, count: 4 });
        expect(first.total).toBe(10);
        expect(first.next).toEqual({
          key:
            sortBy === 'userName'
              ? first.users[3]!.userName.toLowerCase()
              : (first.users[3]![sortBy] ?? null),
          id: first.users[3]!.id,
        });
      }
    }
  });

  it('with total: false, reads only the page: the same pages, total -1', async () => {
    const where = (u: UserRecord) => u.userName.length === 5;
    const cases: UserListOptions[] = [
      { count: 3 },
      { sortBy: 'externalId', sortOrder: 'descending', count: 2 },
      { sortBy: 'externalId', count: 4, where },
      { sortBy: 'userName', count: 1, filter: { attribute: 'active', eq: true } },
      { sortBy: 'id', count: 2, filter: { attribute: 'email', eq: 'shared0@example.org' }, where },
    ];
    for (const options of cases) {
      const counted = await walk(storage, 'p1', options);
      expect(await walk(storage, 'p1', { ...options, total: false })).toEqual(counted);
      const first = await storage.listUsers('p1', { ...options, total: false });
      expect(first.total).toBe(-1);
      if (first.next) {
        const second = await storage.listUsers('p1', {
          ...options,
          total: false,
          after: first.next,
          offset: 1,
        });
        expect(second.users.map((u) => u.id)).toEqual(
          counted.slice(options.count + 1, 2 * options.count + 1),
        );
      } else expect(counted).toHaveLength(first.users.length);
    }
  });

  it('defaults to createdAt ascending and answers records equal to readUser', async () => {
    const page = await storage.listUsers('p1', { count: 20 });
    expect(page.users.map((u) => u.id)).toEqual(referenceOrder(users, 'createdAt', false));
    for (const user of page.users) expect(user).toEqual(await storage.readUser('p1', user.id));
    expect(page.next).toBeUndefined();
    expect(await storage.listUsers('p1')).toEqual(page.users);
    // The copies are the caller's.
    page.users[0]!.data.changed = true;
    expect((await storage.listUsers('p1', { count: 1 })).users[0]!.data.changed).toBeUndefined();
  });
}

/** Filters on indexed attributes, then `where`. */
function userFilterTests(seeded: SeededUsers): void {
  let storage: Storage;
  let users: UserRecord[];
  beforeEach(() => {
    ({ storage, users } = seeded);
  });

  it('filters on indexed attributes, case-insensitively for userName and email', async () => {
    const ids = async (filter: UserListOptions['filter']) => {
      const page = await storage.listUsers('p1', {
        ...(filter ? { filter } : {}),
        sortBy: 'id',
        count: 100,
      });
      expect(page.total).toBe(page.users.length);
      return page.users.map((u) => u.id);
    };
    const byName = (n: string) => users.find((u) => u.userName === n)!.id;
    expect(await ids({ attribute: 'userName', eq: 'ALPHA' })).toEqual([byName('Alpha')]);
    expect(await ids({ attribute: 'userName', eq: 'bravo' })).toEqual([]);
    expect(await ids({ attribute: 'userName', eq: 'ZULU' })).toEqual([users[3]!.id]);
    expect(await ids({ attribute: 'externalId', eq: 'ext-9' })).toEqual([users[0]!.id]);
    expect(await ids({ attribute: 'externalId', eq: 'EXT-9' })).toEqual([]);
    expect(await ids({ attribute: 'profileId', eq: 'prof-3' })).toEqual([users[1]!.id]);
    expect(await ids({ attribute: 'id', eq: 'u7' })).toEqual(['u7']);
    expect(await ids({ attribute: 'id', eq: 'nope' })).toEqual([]);
    expect(await ids({ attribute: 'email', eq: 'CHARLIE@example.ORG' })).toEqual([byName('charlie')]);
    const shared1 = users
      .filter((_, i) => i % 2 === 1)
      .map((u) => u.id)
      .sort();
    expect(await ids({ attribute: 'email', eq: 'shared1@example.org' })).toEqual(shared1);
    const active = users
      .filter((u) => u.active)
      .map((u) => u.id)
      .sort();
    expect(await ids({ attribute: 'active', eq: true })).toEqual(active);
    expect(
      await ids({
        and: [
          { attribute: 'email', eq: 'shared1@example.org' },
          { attribute: 'active', eq: true },
        ],
      }),
    ).toEqual(shared1.filter((id) => active.includes(id)));
    expect(
      await ids({
        or: [
          { attribute: 'userName', eq: 'golf' },
          { attribute: 'externalId', eq: 'ext-5' },
        ],
      }),
    ).toEqual([byName('golf'), users[4]!.id].sort());
    expect(
      await ids({
        or: [
          { attribute: 'userName', eq: 'golf' },
          { attribute: 'active', eq: false },
        ],
      }),
    ).toEqual([byName('golf'), ...users.filter((u) => !u.active).map((u) => u.id)].sort());
    expect(await ids({ and: [] })).toHaveLength(10);
    expect(await ids({ or: [] })).toEqual([]);
    // Another project's users never show.
    const other = await storage.listUsers('p2', {
      filter: { attribute: 'externalId', eq: 'ext-9' },
      count: 5,
    });
    expect(other.users.map((u) => [u.projectId, u.userName])).toEqual([['p2', 'alpha']]);
    expect((await storage.listUsers('none', { count: 5 })).total).toBe(0);
  });

  it('applies where after the filter, counts only what passes, and pages it', async () => {
    const where = (u: UserRecord) => u.userName.length === 5;
    const expected = referenceOrder(users.filter(where), 'userName', true);
    expect(
      await walk(storage, 'p1', { where, sortBy: 'userName', sortOrder: 'descending', count: 2 }),
    ).toEqual(expected);
    const page = await storage.listUsers('p1', {
      where,
      filter: { attribute: 'active', eq: true },
      count: 1,
      offset: 1,
    });
    const activeFive = referenceOrder(
      users.filter((u) => where(u) && u.active),
      'createdAt',
      false,
    );
    expect(page.total).toBe(activeFive.length);
    expect(page.users.map((u) => u.id)).toEqual(activeFive.slice(1, 2));
  });
}

/** Offsets and cursors as positions, the store's own transaction, options refused. */
function userPositionTests(seeded: SeededUsers): void {
  let storage: Storage;
  let users: UserRecord[];
  beforeEach(() => {
    ({ storage, users } = seeded);
  });

  it('skips offset users, from the start or after a cursor, into the users without the key', async () => {
    for (const sortOrder of ['ascending', 'descending'] as const) {
      const all = referenceOrder(users, 'externalId', sortOrder === 'descending');
      for (const offset of [0, 2, 4, 5, 7, 9, 10, 12]) {
        const page = await storage.listUsers('p1', { sortBy: 'externalId', sortOrder, offset, count: 3 });
        expect({ offset, ids: page.users.map((u) => u.id), total: page.total }).toEqual({
          offset,
          ids: all.slice(offset, offset + 3),
          total: 10,
        });
        const first = await storage.listUsers('p1', { sortBy: 'externalId', sortOrder, count: 2 });
        const after = await storage.listUsers('p1', {
          sortBy: 'externalId',
          sortOrder,
          after: first.next!,
          offset,
          count: 2,
        });
        expect(after.users.map((u) => u.id)).toEqual(all.slice(2 + offset, 4 + offset));
      }
    }
    const none = await storage.listUsers('p1', { count: 0 });
    expect(none).toEqual({ users: [], total: 10 });
  });

  it('treats a cursor as a position: the next page starts after it though its user is gone', async () => {
    const first = await storage.listUsers('p1', { sortBy: 'userName', count: 3 });
    await storage.deleteUser('p1', first.users[2]!.id);
    const created = await storage.createUser('p1', newUser('aardvark', { id: 'u-new' }));
    const rest = await walk(storage, 'p1', { sortBy: 'userName', count: 3, after: first.next! });
    expect(created.userName < first.users[0]!.userName.toLowerCase()).toBe(true);
    // Everything after the deleted user, and nothing before it (the new user sorts first).
    expect(rest).toEqual(referenceOrder(users, 'userName', false).slice(3));
    expect((await storage.listUsers('p1', { count: 1 })).total).toBe(10);
  });

  it('sees the writes of its own transaction', async () => {
    await storage.transaction(async (tx) => {
      await tx.createUser('p1', newUser('able', { id: 'u-tx' }));
      await tx.deleteUser('p1', 'u0');
      const page = await tx.listUsers('p1', { sortBy: 'userName', count: 2 });
      expect(page.users.map((u) => u.id)).toEqual(['u-tx', 'u7']);
      expect(page.total).toBe(10);
      expect(
        (await tx.listUsers('p1', { filter: { attribute: 'userName', eq: 'ABLE' }, count: 2 })).total,
      ).toBe(1);
    });
  });

  it('rejects options it cannot answer with ERR_STORAGE_INVALID', async () => {
    const bad: unknown[] = [
      { count: -1 },
      { count: 1.5 },
      { count: 1, offset: -1 },
      { count: 1, sortBy: 'displayName' },
      { count: 1, sortOrder: 'up' },
      { count: 1, after: { key: 1, id: 'x' } },
      { count: 1, after: 'cursor' },
      { count: 1, filter: { attribute: 'displayName', eq: 'x' } },
      { count: 1, filter: { attribute: 'active', eq: 'yes' } },
      { count: 1, filter: { and: 'x' } },
      { count: 1, total: 'no' },
    ];
    for (const options of bad)
      await rejectsWith(storage.listUsers('p1', options as UserListOptions), INVALID);
  });
}

/** The store of the running test and the users {@link seededUsers} put in it. */
interface SeededUsers {
  storage: Storage;
  users: UserRecord[];
}

/** Seeds a fresh store before each test of the group (once, whatever the number of groups). */
function seededUsers(getStorage: () => Storage): SeededUsers {
  const seeded = {} as SeededUsers;
  beforeEach(async () => {
    seeded.storage = getStorage();
    seeded.users = await seedUsers(seeded.storage);
  });
  return seeded;
}

/**
 * Projects p1 and p2; ten users in p1 (some with an externalId, every third inactive, two
 * emails each), two of them updated since, and one in p2. Returns p1's users as they now are.
 */
async function seedUsers(storage: Storage): Promise<UserRecord[]> {
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
  const users: UserRecord[] = [];
  for (const [i, name] of NAMES.entries()) {
    users.push(
      await storage.createUser(
        'p1',
        newUser(name, {
          id: `u${(i * 7) % 10}`,
          profileId: `prof-${(i * 3) % 10}`,
          active: i % 3 !== 0,
          ...(i % 2 === 0 ? { externalId: `ext-${9 - i}` } : {}),
          data: { emails: [{ value: `${name}@Example.org` }, { value: `shared${i % 2}@example.org` }] },
        }),
      ),
    );
  }
  await storage.createUser('p2', newUser('alpha', { id: 'u1', externalId: 'ext-9' }));
  // Updates move users in the updatedAt order and the userName order.
  users[3] = await storage.updateUser('p1', users[3]!.id, { userName: 'zulu' });
  users[0] = await storage.updateUser('p1', users[0]!.id, { active: false });
  return users;
}
