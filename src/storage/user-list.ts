/*
 * Paged user listing (`StorageOperations.listUsers(projectId, options)`): the query, the page, and
 * the rules every adapter shares (the order, what a filter matches, what a cursor is), so that the
 * memory, file and PostgreSQL stores answer the same pages.
 */
import { InvalidRecordError } from './errors.js';
import type { UserRecord } from './record-types.js';

/**
 * A condition on users that a store can answer from its indexes. `userName` and `email` compare
 * case-insensitively (`toLowerCase`); `email` matches when any string `value` of `data.emails`
 * does; `id`, `externalId` and `profileId` compare exactly. An empty `and` matches every user, an
 * empty `or` none.
 */
export type UserFilter =
  | { attribute: 'id' | 'userName' | 'externalId' | 'profileId' | 'email'; eq: string }
  | { attribute: 'active'; eq: boolean }
  | { and: UserFilter[] }
  | { or: UserFilter[] };

/**
 * What a listing is ordered by. `userName` orders by the lower-cased name; the others by the field
 * as stored. Strings compare by UTF-16 code unit (`<`), ties by id. Users without the key
 * (`externalId` absent) come last in either order.
 */
export type UserSortKey = 'createdAt' | 'updatedAt' | 'userName' | 'profileId' | 'externalId' | 'id';

/** A position in a listing's order: the sort key of a user (`null` when it has none) and its id. */
export interface UserCursor {
  key: string | null;
  id: string;
}

/** The query of a paged `listUsers`. */
export interface UserListOptions {
  /** Only users matching it. Stores answer it from their indexes where they can. @default every user */
  filter?: UserFilter;
  /**
   * A further test each user passing `filter` must pass, for what `filter` cannot say (a SCIM
   * filter on `displayName`, …). It runs in JavaScript on the store's copy: the store reads every
   * candidate `filter` leaves to count the total, so keep `filter` as narrow as possible.
   */
  where?: (user: UserRecord) => boolean;
  /** @default 'createdAt' */
  sortBy?: UserSortKey;
  /** @default 'ascending' */
  sortOrder?: 'ascending' | 'descending';
  /** Keyset paging: the page starts right after this position (a previous page's `next`). */
  after?: UserCursor;
  /** Matching users skipped (after `after` when given) before the page starts. @default 0 */
  offset?: number;
  /** Most users returned; 0 returns only the total. */
  count: number;
  /**
   * Count every match into `total`. `false` when the caller knows it already (the next page of a
   * walk): the store then reads only as far as the page, and `total` is -1. @default true
   */
  total?: boolean;
}

/** One page of a paged `listUsers`. */
export interface UserPage {
  /** At most `count` users, in the listing's order. */
  users: UserRecord[];
  /** Number of users matching the query, whatever the page (-1 with `total: false`). */
  total: number;
  /** The position of the last user of the page, when more users match after it: the next `after`. */
  next?: UserCursor;
}

/** The sort key of `user` under `sortBy` (`null` when it has none). */
export function userSortKey(user: UserRecord, sortBy: UserSortKey): string | null {
  switch (sortBy) {
    case 'userName':
      return user.userName.toLowerCase();
    case 'externalId':
      return user.externalId ?? null;
    default:
      return user[sortBy];
  }
}

/** Compares two positions in ascending order: key (missing last), then id. */
export function compareUserPositions(a: UserCursor, b: UserCursor): number {
  if (a.key !== b.key) {
    if (a.key === null) return 1;
    if (b.key === null) return -1;
    return a.key < b.key ? -1 : 1;
  }
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * Compares two positions in the listing's order: descending reverses key and id, but users
 * without a key still come last.
 */
export function compareInOrder(a: UserCursor, b: UserCursor, descending: boolean): number {
  if (!descending || (a.key === null) !== (b.key === null)) return compareUserPositions(a, b);
  return -compareUserPositions(a, b);
}

/** The position of `user` under `sortBy`. */
export function userPosition(user: UserRecord, sortBy: UserSortKey): UserCursor {
  return { key: userSortKey(user, sortBy), id: user.id };
}

function fold(value: string): string {
  return value.toLowerCase();
}

/** The lower-cased email values of a user (what `{ attribute: 'email' }` compares), without duplicates. */
export function userEmails(user: Pick<UserRecord, 'data'>): string[] {
  const emails = user.data.emails;
  if (!Array.isArray(emails)) return [];
  const out = new Set<string>();
  for (const email of emails as unknown[]) {
    if (email !== null && typeof email === 'object' && !Array.isArray(email)) {
      const value = (email as Record<string, unknown>).value;
      if (typeof value === 'string') out.add(fold(value));
    }
  }
  return [...out];
}

/** True when `user` matches `filter`. */
export function matchesUserFilter(user: UserRecord, filter: UserFilter): boolean {
  if ('and' in filter) return filter.and.every((f) => matchesUserFilter(user, f));
  if ('or' in filter) return filter.or.some((f) => matchesUserFilter(user, f));
  switch (filter.attribute) {
    case 'active':
      return user.active === filter.eq;
    case 'userName':
      return fold(user.userName) === fold(filter.eq);
    case 'email':
      return userEmails(user).includes(fold(filter.eq));
    case 'externalId':
      return user.externalId === filter.eq;
    default:
      return user[filter.attribute] === filter.eq;
  }
}

const SORT_KEYS: ReadonlySet<string> = new Set<UserSortKey>([
  'createdAt',
  'updatedAt',
  'userName',
  'profileId',
  'externalId',
  'id',
]);
const STRING_ATTRIBUTES: ReadonlySet<string> = new Set([
  'id',
  'userName',
  'externalId',
  'profileId',
  'email',
]);

function checkFilter(filter: unknown, depth: number): void {
  if (depth > 64) throw new InvalidRecordError('listUsers: filter nested too deep');
  if (filter === null || typeof filter !== 'object') throw new InvalidRecordError('listUsers: bad filter');
  const f = filter as Record<string, unknown>;
  for (const list of [f.and, f.or]) {
    if (list === undefined) continue;
    if (!Array.isArray(list)) throw new InvalidRecordError('listUsers: and/or takes a list');
    for (const item of list) checkFilter(item, depth + 1);
    return;
  }
  const { attribute, eq } = f;
  const ok =
    attribute === 'active'
      ? typeof eq === 'boolean'
      : typeof attribute === 'string' && STRING_ATTRIBUTES.has(attribute) && typeof eq === 'string';
  if (!ok) throw new InvalidRecordError(`listUsers: bad filter on ${String(attribute)}`);
}

/** The options of a paged listing with their defaults, checked. */
export interface ResolvedUserList {
  filter?: UserFilter;
  where?: (user: UserRecord) => boolean;
  sortBy: UserSortKey;
  descending: boolean;
  after?: UserCursor;
  offset: number;
  count: number;
  /** Count every match (`UserListOptions.total`). */
  countAll: boolean;
}

/** Checks `options` (an `InvalidRecordError` names what is wrong) and fills the defaults. */
export function resolveUserList(options: UserListOptions): ResolvedUserList {
  const {
    filter,
    where,
    sortBy = 'createdAt',
    sortOrder = 'ascending',
    after,
    offset = 0,
    count,
    total = true,
  } = options;
  if (typeof total !== 'boolean') throw new InvalidRecordError('listUsers: total must be a boolean');
  if (!SORT_KEYS.has(sortBy)) throw new InvalidRecordError(`listUsers: cannot sort by ${String(sortBy)}`);
  if (sortOrder !== 'ascending' && sortOrder !== 'descending')
    throw new InvalidRecordError('listUsers: sortOrder is ascending or descending');
  if (!Number.isSafeInteger(count) || count < 0)
    throw new InvalidRecordError('listUsers: count must be a non-negative integer');
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new InvalidRecordError('listUsers: offset must be a non-negative integer');
  if (
    after !== undefined &&
    (after === null ||
      typeof after !== 'object' ||
      typeof after.id !== 'string' ||
      (after.key !== null && typeof after.key !== 'string'))
  ) {
    throw new InvalidRecordError('listUsers: after must be a cursor { key, id }');
  }
  if (filter !== undefined) checkFilter(filter, 0);
  if (where !== undefined && typeof where !== 'function')
    throw new InvalidRecordError('listUsers: where must be a function');
  return {
    ...(filter !== undefined ? { filter } : {}),
    ...(where !== undefined ? { where } : {}),
    sortBy,
    descending: sortOrder === 'descending',
    ...(after !== undefined ? { after: { key: after.key, id: after.id } } : {}),
    offset,
    count,
    countAll: total,
  };
}

/**
 * Pages users that arrive in the listing's order, all of them after the cursor: skips `offset`
 * matches, keeps `count`, and counts the rest into `total` (`before` is the number of matches
 * before the cursor, which the caller counted). Users are copied as they are kept.
 */
export function pageOrdered(
  ordered: Iterable<UserRecord>,
  list: ResolvedUserList,
  matches: (user: UserRecord) => boolean,
  before: number,
): UserPage {
  const users: UserRecord[] = [];
  let seen = 0;
  let more = false;
  for (const user of ordered) {
    if (!matches(user)) continue;
    if (seen >= list.offset && users.length < list.count) users.push(structuredClone(user));
    else if (users.length === list.count && seen >= list.offset) {
      more = true;
      if (!list.countAll) break;
    }
    seen++;
  }
  const last = users[users.length - 1];
  return {
    users,
    total: list.countAll ? before + seen : -1,
    ...(more && last ? { next: userPosition(last, list.sortBy) } : {}),
  };
}
