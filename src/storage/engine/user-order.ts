import type { UserRecord } from '../record-types.js';
import { compareUserPositions, userPosition, type UserSortKey } from '../user-list.js';

/** First index of `sorted` (ascending by `sortBy`) whose position is not before `target`'s. */
function lowerBound(sorted: readonly UserRecord[], sortBy: UserSortKey, target: UserRecord): number {
  const at = userPosition(target, sortBy);
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareUserPositions(userPosition(sorted[mid]!, sortBy), at) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * A project's users in ascending order of each sort key a listing asked for (users without the
 * key last), built on first use and kept in step with every later write: a page is then a binary
 * search and a slice, whatever the number of users. One array of references per key used.
 */
export class UserOrders {
  private readonly lists = new Map<UserSortKey, UserRecord[]>();

  /** The users of `all` in ascending `sortBy` order (the array is kept: do not change it). */
  sorted(all: ReadonlyMap<string, UserRecord>, sortBy: UserSortKey): readonly UserRecord[] {
    let list = this.lists.get(sortBy);
    if (!list) {
      const keyed = [...all.values()].map((u) => ({ u, at: userPosition(u, sortBy) }));
      keyed.sort((a, b) => compareUserPositions(a.at, b.at));
      list = keyed.map((k) => k.u);
      this.lists.set(sortBy, list);
    }
    return list;
  }

  /** Replaces `old` (when given) by `record` in every list built. */
  put(old: UserRecord | undefined, record: UserRecord): void {
    for (const [sortBy, list] of this.lists) {
      if (old) this.remove(list, sortBy, old);
      list.splice(lowerBound(list, sortBy, record), 0, record);
    }
  }

  /** Removes `old` from every list built. */
  delete(old: UserRecord): void {
    for (const [sortBy, list] of this.lists) this.remove(list, sortBy, old);
  }

  private remove(list: UserRecord[], sortBy: UserSortKey, old: UserRecord): void {
    const i = lowerBound(list, sortBy, old);
    if (list[i]?.id === old.id) list.splice(i, 1);
  }
}
