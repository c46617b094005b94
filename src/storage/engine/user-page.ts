import type { UserQuery, UserRecord } from '../record-types.js';
import {
  compareInOrder,
  matchesUserFilter,
  pageOrdered,
  userPosition,
  type ResolvedUserList,
  type UserCursor,
  type UserFilter,
  type UserPage,
} from '../user-list.js';
import type { StateView } from './state.js';

/**
 * The users that may match `filter`, from the indexes (`userName`, `externalId`, `profileId`,
 * `email`, `id`), or `undefined` when it needs every user (`active`, an `or` with such a side).
 */
function candidates(view: StateView, projectId: string, filter: UserFilter): UserRecord[] | undefined {
  if ('and' in filter) {
    let best: UserRecord[] | undefined;
    for (const part of filter.and) {
      const found = candidates(view, projectId, part);
      if (found && (!best || found.length < best.length)) best = found;
    }
    return best;
  }
  if ('or' in filter) {
    const union = new Map<string, UserRecord>();
    for (const part of filter.or) {
      const found = candidates(view, projectId, part);
      if (!found) return undefined;
      for (const u of found) union.set(u.id, u);
    }
    return [...union.values()];
  }
  let ids: string[];
  switch (filter.attribute) {
    case 'active':
      return undefined;
    case 'id':
      ids = [filter.eq];
      break;
    case 'userName':
      ids = view.userIds(projectId, 'name', filter.eq.toLowerCase());
      break;
    case 'email':
      ids = view.userIds(projectId, 'email', filter.eq.toLowerCase());
      break;
    default:
      ids = view.userIds(projectId, filter.attribute, filter.eq);
  }
  return ids.map((id) => view.user(projectId, id)).filter((u): u is UserRecord => u !== undefined);
}

/** The number of `ordered` positions before `after` (all when it is past the end): a binary search. */
function startOf(
  at: (p: number) => UserRecord,
  length: number,
  list: ResolvedUserList,
  after: UserCursor,
): number {
  let lo = 0;
  let hi = length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareInOrder(userPosition(at(mid), list.sortBy), after, list.descending) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** `findUsers(query)` as a listing: every match, by `createdAt` then id. */
export function userQueryList(query: UserQuery): ResolvedUserList {
  const and: UserFilter[] = [];
  if (query.userName !== undefined) and.push({ attribute: 'userName', eq: query.userName });
  if (query.externalId !== undefined) and.push({ attribute: 'externalId', eq: query.externalId });
  if (query.profileId !== undefined) and.push({ attribute: 'profileId', eq: query.profileId });
  return {
    filter: { and },
    sortBy: 'createdAt',
    descending: false,
    offset: 0,
    count: Number.MAX_SAFE_INTEGER,
    countAll: true,
  };
}

/**
 * A page of users of the memory and file stores: from the indexes when the filter names an indexed
 * attribute, else from the project's users kept in order (`StateView.sortedUsers`), where a page
 * without a filter is a binary search and a slice.
 */
export function engineUserPage(view: StateView, projectId: string, list: ResolvedUserList): UserPage {
  const { filter, where } = list;
  const matches =
    filter || where
      ? (u: UserRecord) => (!filter || matchesUserFilter(u, filter)) && (!where || where(u))
      : () => true;
  const found = filter ? candidates(view, projectId, filter) : undefined;
  let at: (p: number) => UserRecord;
  let length: number;
  if (found) {
    const keyed = found.map((u) => ({ u, pos: userPosition(u, list.sortBy) }));
    keyed.sort((a, b) => compareInOrder(a.pos, b.pos, list.descending));
    at = (p) => keyed[p]!.u;
    length = keyed.length;
  } else {
    const sorted = view.sortedUsers(projectId, list.sortBy);
    length = sorted.length;
    if (!list.descending) at = (p) => sorted[p]!;
    else {
      // Descending: the users with a key from the last, then those without one from the last.
      const keyed = startOf((p) => sorted[p]!, length, { ...list, descending: false }, { key: null, id: '' });
      at = (p) => sorted[p < keyed ? keyed - 1 - p : length - 1 - (p - keyed)]!;
    }
  }
  const start = list.after ? startOf(at, length, list, list.after) : 0;
  function* from(p: number): Iterable<UserRecord> {
    for (; p < length; p++) yield at(p);
  }
  if (!filter && !where) {
    // Every user matches: the page is a slice.
    const first = Math.min(length, start + list.offset);
    const end = Math.min(length, first + list.count);
    const users: UserRecord[] = [];
    for (let p = first; p < end; p++) users.push(structuredClone(at(p)));
    const last = users[users.length - 1];
    return {
      users,
      total: list.countAll ? length : -1,
      ...(end < length && last ? { next: userPosition(last, list.sortBy) } : {}),
    };
  }
  let before = 0;
  if (list.countAll) for (let p = 0; p < start; p++) if (matches(at(p))) before++;
  return pageOrdered(from(start), list, matches, before);
}
