import { DAY_MICROS } from '../history-retention.js';
import type { HistoryRetention } from '../types.js';
import type { VersionList } from './history.js';

/**
 * Which versions of `list` the retention keeps (by index): every current version and every
 * version `retention` asks for. A kept version's successor is always kept too (the last `n`
 * versions, or those superseded after a moment), so the kept versions still link up.
 */
export function keptVersions(list: VersionList, retention: HistoryRetention, nowMicros: number): boolean[] {
  const { versions } = list;
  if (retention === 'all') return versions.map(() => true);
  if ('days' in retention) {
    const after = nowMicros - retention.days * DAY_MICROS;
    return versions.map((v) => v.superseded < 0 || versions[v.superseded]!.lastUpdatedMicros >= after);
  }
  const kept = versions.map(() => false);
  for (const latest of list.latest.values()) {
    let index = latest;
    for (let depth = 0; index >= 0 && depth < retention.versions; depth++) {
      kept[index] = true;
      index = versions[index]!.prev;
    }
  }
  return kept;
}

/**
 * The kept versions of `list` as a new list of the same shape: the same order, `prev` and
 * `superseded` pointing at the new places (`prev` -1 where the previous version was dropped).
 * Answers the list and where each old index went (-1: dropped).
 */
export function keepOnly<H extends VersionList['versions'][number]>(
  versions: readonly H[],
  kept: readonly boolean[],
): { versions: H[]; latest: Map<string, number>; moved: Int32Array } {
  const moved = new Int32Array(versions.length).fill(-1);
  const fresh: H[] = [];
  const latest = new Map<string, number>();
  versions.forEach((v, i) => {
    if (!kept[i]) return;
    moved[i] = fresh.length;
    fresh.push({ ...v });
  });
  fresh.forEach((v, i) => {
    v.prev = v.prev >= 0 ? moved[v.prev]! : -1;
    v.superseded = v.superseded >= 0 ? moved[v.superseded]! : -1;
    if (v.superseded < 0) latest.set(v.id, i);
  });
  return { versions: fresh, latest, moved };
}
