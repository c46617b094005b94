import type { UserRecord } from '../record-types.js';
import {
  compareInOrder,
  pageOrdered,
  userEmails,
  userPosition,
  type ResolvedUserList,
  type UserCursor,
  type UserFilter,
  type UserPage,
  type UserSortKey,
} from '../user-list.js';
import type { Query } from './executor.js';

/**
 * The column of each sort key, as the `users_by_*` indexes order it ("C" collation: code-unit
 * order, as the other stores compare; `user_name_key` is lower-cased in JavaScript on write).
 */
const SORT_COLUMN: Record<UserSortKey, string> = {
  createdAt: 'created_at COLLATE "C"',
  updatedAt: 'updated_at COLLATE "C"',
  userName: 'user_name_key COLLATE "C"',
  profileId: 'profile_id COLLATE "C"',
  externalId: 'external_id COLLATE "C"',
  id: 'id',
};

/** The `users` columns a user's listing needs besides those of `record`: what a write sets. */
export function userListColumns(user: UserRecord): { updatedAt: string; emails: string[] } {
  return { updatedAt: user.updatedAt, emails: userEmails(user) };
}

/** Builds a statement's positional parameters. */
class Params {
  readonly values: unknown[] = [];
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

/** `filter` as a condition on `users` (each indexed attribute has its index). */
function filterSql(filter: UserFilter, params: Params): string {
  if ('and' in filter)
    return filter.and.length ? `(${filter.and.map((f) => filterSql(f, params)).join(' AND ')})` : 'TRUE';
  if ('or' in filter)
    return filter.or.length ? `(${filter.or.map((f) => filterSql(f, params)).join(' OR ')})` : 'FALSE';
  switch (filter.attribute) {
    case 'active':
      return `(record->>'active')::boolean = ${params.add(filter.eq)}`;
    case 'id':
      return `id = ${params.add(filter.eq)}`;
    case 'userName':
      return `user_name_key = ${params.add(filter.eq.toLowerCase())}`;
    case 'externalId':
      return `external_id = ${params.add(filter.eq)}`;
    case 'profileId':
      return `profile_id = ${params.add(filter.eq)}`;
    case 'email':
      return `emails @> ARRAY[${params.add(filter.eq.toLowerCase())}::text]`;
  }
}

interface Slice {
  /** Only users with a key (`true`) or only those without one. */
  keyed: boolean;
  after?: UserCursor;
  offset: number;
  limit: number;
}

/**
 * One index range of the order: the users with a key after the cursor, or those without one. Each
 * is a range scan of a `users_by_*` index (backwards when descending), never a scan of what is
 * before the cursor.
 */
async function readSlice(
  query: Query,
  s: string,
  projectId: string,
  list: ResolvedUserList,
  slice: Slice,
): Promise<UserRecord[]> {
  const params = new Params();
  const k = SORT_COLUMN[list.sortBy];
  const where = [`project_id = ${params.add(projectId)}`];
  if (list.filter) where.push(filterSql(list.filter, params));
  const lt = list.descending ? '<' : '>';
  if (!slice.keyed) {
    where.push(`${k} IS NULL`);
    if (slice.after) where.push(`id ${lt} ${params.add(slice.after.id)}`);
  } else if (slice.after) {
    where.push(`(${k}, id) ${lt} (${params.add(slice.after.key)}, ${params.add(slice.after.id)})`);
  } else if (list.sortBy === 'externalId') {
    where.push(`${k} IS NOT NULL`);
  }
  const dir = list.descending ? ' DESC' : '';
  const { rows } = await query<{ record: UserRecord }>(
    `SELECT record FROM ${s}.users WHERE ${where.join(' AND ')}
      ORDER BY ${k}${dir}, id${dir} LIMIT ${params.add(slice.limit)} OFFSET ${params.add(slice.offset)}`,
    params.values,
  );
  return rows.map((r) => r.record);
}

async function countSql(
  query: Query,
  s: string,
  projectId: string,
  list: ResolvedUserList,
  keyed?: { after?: UserCursor },
): Promise<number> {
  const params = new Params();
  const where = [`project_id = ${params.add(projectId)}`];
  if (list.filter) where.push(filterSql(list.filter, params));
  if (keyed) {
    const k = SORT_COLUMN[list.sortBy];
    const lt = list.descending ? '<' : '>';
    where.push(
      keyed.after
        ? `(${k}, id) ${lt} (${params.add(keyed.after.key)}, ${params.add(keyed.after.id)})`
        : `${k} IS NOT NULL`,
    );
  }
  const { rows } = await query<{ n: string }>(
    `SELECT count(*) AS n FROM ${s}.users WHERE ${where.join(' AND ')}`,
    params.values,
  );
  return Number(rows[0]?.n ?? 0);
}

/** Users without the sort key exist only for `externalId`. */
function nullable(sortBy: UserSortKey): boolean {
  return sortBy === 'externalId';
}

/** Every user matching the SQL part of the filter, in the listing's order, read in batches. */
async function* everyCandidate(
  query: Query,
  s: string,
  projectId: string,
  list: ResolvedUserList,
  from?: UserCursor,
): AsyncIterable<UserRecord> {
  const batch = 1000;
  for (const keyed of nullable(list.sortBy) ? [true, false] : [true]) {
    // From the cursor: its slice (with a key, or without) from there, and the slices after it.
    if (from && from.key === null && keyed) continue;
    let after: UserCursor | undefined = from && (from.key === null) === !keyed ? from : undefined;
    for (;;) {
      const rows = await readSlice(query, s, projectId, list, {
        keyed,
        ...(after ? { after } : {}),
        offset: 0,
        limit: batch,
      });
      yield* rows;
      if (rows.length < batch) break;
      after = userPosition(rows[rows.length - 1]!, list.sortBy);
    }
  }
}

/**
 * A page of users of the PostgreSQL store. Filter, order, count and paging run in SQL when there
 * is no `where`: the page is one or two index range scans from the cursor, the total one count
 * over the filter's index. With `where`, the candidates of the SQL filter are read in order in
 * batches and tested in JavaScript (the total needs every one).
 */
export async function postgresUserPage(
  query: Query,
  s: string,
  projectId: string,
  list: ResolvedUserList,
): Promise<UserPage> {
  if (list.where && !list.countAll) {
    // Only the page: read from the cursor, as far as the page goes.
    const matched: UserRecord[] = [];
    for await (const user of everyCandidate(query, s, projectId, list, list.after)) {
      if (!list.where(user)) continue;
      matched.push(user);
      if (matched.length > list.offset + list.count) break;
    }
    return pageOrdered(matched, list, () => true, 0);
  }
  if (list.where) {
    const where = list.where;
    const all: UserRecord[] = [];
    for await (const user of everyCandidate(query, s, projectId, list)) if (where(user)) all.push(user);
    const after = list.after;
    const start = after
      ? all.findIndex((u) => compareInOrder(userPosition(u, list.sortBy), after, list.descending) > 0)
      : 0;
    const from = start < 0 ? all.length : start;
    return pageOrdered(all.slice(from), list, () => true, from);
  }
  const total = list.countAll ? await countSql(query, s, projectId, list) : -1;
  const want = list.count + 1;
  const users: UserRecord[] = [];
  let offset = list.offset;
  if (list.after?.key !== null) {
    const after = list.after;
    users.push(
      ...(await readSlice(query, s, projectId, list, {
        keyed: true,
        ...(after ? { after } : {}),
        offset,
        limit: want,
      })),
    );
    if (users.length === 0 && offset > 0 && nullable(list.sortBy)) {
      // The offset may reach past the users with a key: skip the ones there were.
      const keyedCount = await countSql(query, s, projectId, list, after ? { after } : {});
      offset = Math.max(0, offset - keyedCount);
    } else if (users.length > 0) offset = 0;
  }
  if (users.length < want && nullable(list.sortBy)) {
    const after = list.after?.key === null ? list.after : undefined;
    users.push(
      ...(await readSlice(query, s, projectId, list, {
        keyed: false,
        ...(after ? { after } : {}),
        offset,
        limit: want - users.length,
      })),
    );
  }
  const more = users.length > list.count;
  const page = users.slice(0, list.count);
  const last = page[page.length - 1];
  return { users: page, total, ...(more && last ? { next: userPosition(last, list.sortBy) } : {}) };
}
