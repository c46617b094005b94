import type { ParameterFilter, SearchRequest, SearchValue } from '../search-request.js';
import type { ResourceEntry } from './mutation.js';
import { builtCode, KEY_SEPARATOR, pair, posted, postingKey, presenceKey, unpair } from './posting-keys.js';
import { boxOf, exactFilter, intersectBoxes, passing, rangeTest, type RangeTest } from './posting-match.js';
import { SortedRanges, SortedStrings, type Box } from './sorted-keys.js';

/*
 * The search postings of one type of one project in the memory and file stores: each posting
 * key (`posting-keys.ts`) to the current entries holding it, with per-parameter lookups (a token
 * code under any system, a reference id under any type, string prefixes, ordered ranges). Only
 * the parameters in `built` are posted: a parameter is built on demand, by the first search that
 * filters on it (`build-postings.ts`), then kept up to date by every write. A search is narrowed
 * to the entries of its most selective filter the postings can answer, and the store's `where`
 * decides on each one; when every filter is one the keys answer exactly (`exactFilter`), the
 * intersection of their entries is the answer itself and `where` can be skipped.
 */

/** What the postings answer of a search (see `TypePostings.candidates`). */
export interface SearchCandidates {
  /** Entries holding every match (tombstones possibly included). */
  entries: Iterable<ResourceEntry>;
  /** True when `entries` are exactly the live matches of the search's filters (no `where` needed). */
  exact: boolean;
}

/** The entries posted under one key: one entry alone (most keys), or a set. */
interface Slot {
  readonly key: string;
  /** The parameter code of an ordered value's key (undefined for other kinds). */
  readonly ordered: string | undefined;
  one: ResourceEntry | undefined;
  many: Set<ResourceEntry> | undefined;
}

const slotSize = (slot: Slot): number => slot.many?.size ?? (slot.one ? 1 : 0);

/** The lookups of one parameter, over its distinct keys. */
class ParamIndex {
  readonly byCode = new Map<string, Set<string>>();
  readonly bySystem = new Map<string, Set<string>>();
  readonly byRefId = new Map<string, Set<string>>();
  readonly strings = new SortedStrings();
  readonly ordered = new SortedRanges();
  /** Some entry holds two ordered values: filters on this parameter cannot be intersected per value. */
  multi = false;
  /** Keys of ordered values whose low end is above their high end: candidates of every range. */
  readonly odd = new Set<string>();

  /** The keys of the ordered values that may fall in `box`, odd ones included. */
  *inside(box: Box, isLive: (key: string) => boolean): Iterable<string> {
    yield* this.ordered.inside(box, isLive);
    yield* this.odd;
  }
}

function addTo(map: Map<string, Set<string>>, part: string, key: string): void {
  let keys = map.get(part);
  if (!keys) map.set(part, (keys = new Set()));
  keys.add(key);
}

function removeFrom(map: Map<string, Set<string>>, part: string, key: string): void {
  const keys = map.get(part);
  keys?.delete(key);
  if (keys?.size === 0) map.delete(part);
}

/** The postings of one type of one project. */
export class TypePostings {
  private readonly slots = new Map<string, Slot>();
  private readonly params = new Map<string, ParamIndex>();
  /** Current entries. */
  private live = 0;
  private readonly isLive = (key: string): boolean => this.slots.has(key);
  /**
   * The parameters posted: every current entry's `postings` hold its keys of each of them (and of
   * no other). A write computes the keys of exactly these; a search uses only these.
   */
  readonly built = new Set<string>();
  /** The builds under way, by parameter (`build-postings.ts`): a search waits for its parameters'. */
  readonly building = new Map<string, Promise<void>>();

  /** Number of current entries. */
  get size(): number {
    return this.live;
  }

  /** Posts a current entry; its `postings` then hold the key strings the slots keep (shared). */
  add(entry: ResourceEntry): void {
    this.live += 1;
    const keys = entry.postings;
    if (keys === undefined) return;
    entry.postings = this.post(entry, keys);
  }

  /**
   * Posts more keys of a current entry (of parameters being built, none of them in `built` yet),
   * after those it holds.
   */
  extend(entry: ResourceEntry, keys: readonly string[]): void {
    if (keys.length === 0) return;
    const kept = this.post(entry, keys);
    entry.postings =
      entry.postings === undefined || entry.postings.length === 0 ? kept : [...entry.postings, ...kept];
  }

  private post(entry: ResourceEntry, keys: readonly string[]): string[] {
    const kept = new Array<string>(keys.length);
    let orderedCode: string | undefined;
    for (let i = 0; i < keys.length; i++) {
      let slot = this.slots.get(keys[i]!);
      if (!slot) slot = this.createSlot(keys[i]!);
      if (slot.one === undefined && slot.many === undefined) slot.one = entry;
      else {
        if (!slot.many) slot.many = new Set([slot.one!]);
        slot.one = undefined;
        slot.many.add(entry);
      }
      kept[i] = slot.key;
      const code = slot.ordered;
      if (code !== undefined) {
        if (code === orderedCode) this.params.get(code)!.multi = true;
        orderedCode = code;
      }
    }
    return kept;
  }

  /** Removes a current entry posted by `add`. */
  remove(entry: ResourceEntry): void {
    this.live -= 1;
    if (entry.postings === undefined) return;
    for (const key of entry.postings) {
      const slot = this.slots.get(key);
      if (!slot) continue;
      if (slot.one === entry) slot.one = undefined;
      slot.many?.delete(entry);
      if (slot.many?.size === 1) {
        slot.one = slot.many.values().next().value;
        slot.many = undefined;
      }
      if (slotSize(slot) === 0) this.deleteSlot(key);
    }
  }

  private param(code: string): ParamIndex {
    let param = this.params.get(code);
    if (!param) this.params.set(code, (param = new ParamIndex()));
    return param;
  }

  private createSlot(key: string): Slot {
    const sep = key.indexOf(KEY_SEPARATOR);
    const code = key.slice(0, sep);
    const slot: Slot = {
      key,
      ordered: key[sep + 1] === 'o' ? code : undefined,
      one: undefined,
      many: undefined,
    };
    this.slots.set(key, slot);
    const param = this.param(code);
    const value = key.slice(sep + 2);
    switch (key[sep + 1]) {
      case 't': {
        const [system, code] = unpair(value);
        addTo(param.byCode, code, key);
        addTo(param.bySystem, system, key);
        break;
      }
      case 'r':
        addTo(param.byRefId, unpair(value)[1], key);
        break;
      case 's':
        param.strings.add(key);
        break;
      case 'o': {
        const colon = value.indexOf(':');
        const lo = Number(value.slice(0, colon));
        const hi = Number(value.slice(colon + 1));
        if (lo <= hi) param.ordered.add({ lo, hi, key });
        else param.odd.add(key);
        break;
      }
      default:
        break;
    }
    return slot;
  }

  private deleteSlot(key: string): void {
    this.slots.delete(key);
    const sep = key.indexOf(KEY_SEPARATOR);
    const param = this.params.get(key.slice(0, sep));
    if (!param) return;
    const value = key.slice(sep + 2);
    switch (key[sep + 1]) {
      case 't': {
        const [system, code] = unpair(value);
        removeFrom(param.byCode, code, key);
        removeFrom(param.bySystem, system, key);
        break;
      }
      case 'r':
        removeFrom(param.byRefId, unpair(value)[1], key);
        break;
      case 's':
        param.strings.removed();
        break;
      case 'o':
        if (!param.odd.delete(key)) param.ordered.removed();
        break;
      default:
        break;
    }
  }

  /** The keys one value of a filter may match, or undefined when the postings cannot tell. */
  private valueKeys(filter: ParameterFilter, value: SearchValue): Iterable<string> | undefined {
    const { code } = filter;
    const param = this.params.get(code);
    const none: string[] = [];
    switch (value.type) {
      case 'token':
        if (filter.modifier !== undefined || value.text !== undefined || value.typeSystem !== undefined)
          return undefined;
        if (value.code === undefined) {
          if (typeof value.system !== 'string') return undefined;
          return param?.bySystem.get(value.system) ?? none;
        }
        if (value.system === undefined) return param?.byCode.get(value.code) ?? none;
        return [postingKey(code, 't', pair(value.system ?? '', value.code))];
      case 'reference': {
        if (filter.modifier !== undefined || value.identifier !== undefined) return undefined;
        const keys: string[] = [];
        if (value.url !== undefined) keys.push(postingKey(code, 'u', value.url));
        if (value.id === undefined) return keys;
        const type = value.resourceType ?? filter.targetType;
        if (type !== undefined) keys.push(postingKey(code, 'r', pair(type, value.id)));
        else keys.push(...(param?.byRefId.get(value.id) ?? []));
        return keys;
      }
      case 'uri':
        return filter.modifier === undefined ? [postingKey(code, 'u', value.value)] : undefined;
      case 'string': {
        if (filter.modifier === 'exact') return [postingKey(code, 's', value.normalized)];
        if (!param) return none;
        if (filter.modifier === 'contains') {
          const all = param.strings.withPrefix(postingKey(code, 's', ''), this.isLive);
          const start = code.length + 2;
          return [...all].filter((key) => key.includes(value.normalized, start));
        }
        if (filter.modifier !== undefined) return undefined;
        return param.strings.withPrefix(postingKey(code, 's', value.normalized), this.isLive);
      }
      case 'date':
      case 'number':
      case 'quantity': {
        if (filter.modifier !== undefined) return undefined;
        const box = boxOf(value);
        if (!box) return undefined;
        if (!param) return none;
        const test = rangeTest(value);
        return test ? passing(param.inside(box, this.isLive), [test]) : param.inside(box, this.isLive);
      }
      default:
        return undefined;
    }
  }

  /**
   * The keys a filter may match (any of its values), or undefined: when its code is not built, or
   * the postings cannot tell (`:missing=true` is answered apart, see `absent`).
   */
  private filterKeys(filter: ParameterFilter): Iterable<string>[] | undefined {
    if (!posted(filter) || !this.built.has(builtCode(filter))) return undefined;
    if (filter.modifier === 'missing') return filter.missing ? undefined : [[presenceKey(filter.code)]];
    const lists: Iterable<string>[] = [];
    for (const value of filter.values) {
      const keys = this.valueKeys(filter, value);
      if (!keys) return undefined;
      lists.push(keys);
    }
    return lists;
  }

  /**
   * One-value ordered filters on the same parameter, ANDed into one range (`date=ge2020&date=lt2021`):
   * only where no entry holds two values of it (else each filter may match a different value).
   * Answers, per parameter so combined, the filters it stands for and its keys.
   */
  private combinedRanges(
    filters: ParameterFilter[],
  ): { merged: ParameterFilter[]; keys: Iterable<string> }[] {
    const groups = new Map<string, { merged: ParameterFilter[]; boxes: Box[]; tests: RangeTest[] }>();
    for (const f of filters) {
      const [value] = f.values;
      if (f.values.length !== 1 || f.modifier !== undefined || !value || !posted(f)) continue;
      const box = boxOf(value);
      if (!box) continue;
      let group = groups.get(f.code);
      if (!group) groups.set(f.code, (group = { merged: [], boxes: [], tests: [] }));
      group.merged.push(f);
      group.boxes.push(box);
      const test = rangeTest(value);
      if (test) group.tests.push(test);
    }
    const out: { merged: ParameterFilter[]; keys: Iterable<string> }[] = [];
    for (const [code, { merged, boxes, tests }] of groups) {
      const param = this.params.get(code);
      if (merged.length < 2 || !param || param.multi || !this.built.has(code)) continue;
      out.push({ merged, keys: passing(param.inside(boxes.reduce(intersectBoxes), this.isLive), tests) });
    }
    return out;
  }

  /**
   * The current entries that may match `search` (a superset of its matches), from its most
   * selective filter on a built parameter the postings can answer; undefined when none narrows it
   * below half the type. When every filter is answered exactly (`exactFilter`, none a chain or
   * `_has`), the entries of all of them intersected, `exact` (only those of `among` when given; of
   * `all`, the type's entries, when only `:missing=true` filters remain).
   */
  candidates(
    search: SearchRequest,
    among?: Iterable<ResourceEntry>,
    all?: () => Iterable<ResourceEntry>,
  ): SearchCandidates | undefined {
    const filters = search.filters.filter((f): f is ParameterFilter => f.kind === 'parameter');
    const answered = filters.map((f) => this.filterKeys(f));
    const absent = filters.map((f) => (this.isAbsence(f) ? presenceKey(f.code) : undefined));
    const combined = this.combinedRanges(filters);
    if (
      filters.length > 0 &&
      filters.length === search.filters.length &&
      filters.every((f, i) => absent[i] !== undefined || (answered[i] !== undefined && exactFilter(f)))
    ) {
      // Each combined range once, for the filters it stands for; every other filter on its own.
      const merged = new Set(combined.flatMap((c) => c.merged));
      const lists = [
        ...combined.map((c) => [c.keys]),
        ...answered.filter(
          (keys, i): keys is Iterable<string>[] => keys !== undefined && !merged.has(filters[i]!),
        ),
      ];
      const from = lists.length > 0 ? this.intersection(lists, among) : (among ?? all?.());
      if (from) return { entries: withoutKeys(from, absent), exact: true };
    }
    const options = [
      ...answered.filter((k): k is Iterable<string>[] => k !== undefined),
      ...combined.map((c) => [c.keys]),
    ];
    let best: Slot[] | undefined;
    let limit = this.live >> 1;
    for (const lists of options) {
      const found = this.slotsOf(lists, limit);
      if (!found) continue;
      best = found.slots;
      limit = found.size;
      if (limit === 0) break;
    }
    if (!best) return undefined;
    const out = new Set<ResourceEntry>();
    for (const slot of best) {
      if (slot.one) out.add(slot.one);
      else for (const e of slot.many ?? []) out.add(e);
    }
    return { entries: out, exact: false };
  }

  /** Whether `filter` is a `:missing=true` the postings answer: the entries without its presence key. */
  private isAbsence(filter: ParameterFilter): boolean {
    return (
      filter.modifier === 'missing' &&
      filter.missing === true &&
      posted(filter) &&
      this.built.has(builtCode(filter))
    );
  }

  /**
   * The entries holding some key of each filter's lists: from the smallest (or `among`), checked
   * against the others.
   */
  private intersection(answered: Iterable<string>[][], among?: Iterable<ResourceEntry>): ResourceEntry[] {
    const found = answered.map((lists) => this.slotsOf(lists, Infinity)!).sort((a, b) => a.size - b.size);
    const holds = (slots: Slot[]): Set<string> => new Set(slots.map((slot) => slot.key));
    const out: ResourceEntry[] = [];
    if (among) {
      const all = found.map(({ slots }) => holds(slots));
      for (const e of among) if (all.every((keys) => e.postings?.some((key) => keys.has(key)))) out.push(e);
      return out;
    }
    const [first, ...rest] = found;
    const others = rest.map(({ slots }) => holds(slots));
    // An entry holds one slot's key once: only several slots can repeat it.
    const seen = first!.slots.length > 1 ? new Set<ResourceEntry>() : undefined;
    const keep = (e: ResourceEntry): void => {
      if (seen) {
        if (seen.has(e)) return;
        seen.add(e);
      }
      if (others.length === 0 || others.every((keys) => e.postings?.some((key) => keys.has(key))))
        out.push(e);
    };
    for (const slot of first!.slots) {
      if (slot.one) keep(slot.one);
      else for (const e of slot.many ?? []) keep(e);
    }
    return out;
  }

  /** The distinct live slots of the keys and their entries' number; undefined past `limit` entries. */
  private slotsOf(lists: Iterable<string>[], limit: number): { slots: Slot[]; size: number } | undefined {
    const seen = new Set<string>();
    const slots: Slot[] = [];
    let size = 0;
    for (const keys of lists) {
      for (const key of keys) {
        const slot = this.slots.get(key);
        if (!slot || seen.has(key)) continue;
        seen.add(key);
        slots.push(slot);
        size += slotSize(slot);
        if (size > limit) return undefined;
      }
    }
    return { slots, size };
  }
}

/** The live entries of `entries` holding none of the keys `absent` names (undefined ones skipped). */
function withoutKeys(entries: Iterable<ResourceEntry>, absent: (string | undefined)[]): ResourceEntry[] {
  const keys = absent.filter((key): key is string => key !== undefined);
  const out: ResourceEntry[] = [];
  for (const e of entries) {
    if (e.deleted) continue;
    if (keys.length === 0 || !keys.some((key) => e.postings?.includes(key) === true)) out.push(e);
  }
  return out;
}
