/**
 * How a SCIM list request (RFC 7644 §3.4.2) becomes a paged storage listing (`listUsers` with
 * options): the part of the filter the store answers from its indexes, the storage sort key of
 * `sortBy`, and the cursors that map `startIndex` to keyset positions.
 *
 * SCIM pages by `startIndex` (a 1-based offset), but an offset costs the users before it on every
 * page, so an identity provider walking every page would cost O(n²). Each answered page remembers
 * the keyset position where the next page starts, under the walk (project, filter, order) and that
 * next `startIndex`; a client asking for it gets a page read from that position, in time
 * independent of the users before it, and a whole walk costs O(n). The walk's `totalResults` is
 * counted on the page no position led to (its first) and carried along: counting the matches again
 * on every page would cost O(n) a page on PostgreSQL. A `startIndex` nobody asked to
 * continue to (a client jumping, another instance behind a load balancer, an expired entry) is
 * answered with an offset: correct, and as costly as before.
 */
import type { UserCursor, UserFilter, UserSortKey } from '../storage/types.js';
import type { ScimFilter } from './filter-parser.js';
import { resolveAttribute, type ResolvedAttribute, type ScimResourceSchemas } from './schema.js';

/** `value eq …` inside `emails[…]`: the only value-path filter the stores index. */
function emailValueFilter(filter: ScimFilter): UserFilter | undefined {
  if (filter.type === 'and') return emailValueFilter(filter.left) ?? emailValueFilter(filter.right);
  if (filter.type === 'or') {
    const left = emailValueFilter(filter.left);
    const right = left && emailValueFilter(filter.right);
    return left && right ? { or: [left, right] } : undefined;
  }
  if (filter.type !== 'compare' || filter.operator !== 'eq' || typeof filter.value !== 'string')
    return undefined;
  const { path } = filter;
  if (
    path.schema !== undefined ||
    path.subAttribute !== undefined ||
    path.attribute.toLowerCase() !== 'value'
  )
    return undefined;
  return { attribute: 'email', eq: filter.value };
}

/** A core attribute's lower-cased name and sub-attribute name, or undefined for an extension's. */
function coreName(attribute: ResolvedAttribute | undefined): [string, string | undefined] | undefined {
  if (!attribute || attribute.extension !== undefined) return undefined;
  return [attribute.definition.name.toLowerCase(), attribute.subAttribute?.name.toLowerCase()];
}

/**
 * A storage filter whose matches hold every user `filter` can match (a superset: the caller still
 * tests each one with the whole filter), from `id`, `externalId`, `userName` (the stored name or
 * the profile id), `emails` / `emails.value` and `active` comparisons under `and`, `or` and
 * `emails[…]`. Undefined when nothing narrows the users down.
 */
export function scimStorageFilter(filter: ScimFilter, schemas: ScimResourceSchemas): UserFilter | undefined {
  switch (filter.type) {
    case 'and': {
      const parts = [
        scimStorageFilter(filter.left, schemas),
        scimStorageFilter(filter.right, schemas),
      ].filter((f): f is UserFilter => f !== undefined);
      return parts.length > 1 ? { and: parts } : parts[0];
    }
    case 'or': {
      const left = scimStorageFilter(filter.left, schemas);
      const right = left && scimStorageFilter(filter.right, schemas);
      return left && right ? { or: [left, right] } : undefined;
    }
    case 'valuePath': {
      const name = coreName(resolveAttribute(schemas, filter.path));
      return name?.[0] === 'emails' && name[1] === undefined ? emailValueFilter(filter.filter) : undefined;
    }
    case 'compare': {
      if (filter.operator !== 'eq') return undefined;
      const name = coreName(resolveAttribute(schemas, filter.path));
      if (!name) return undefined;
      const [attribute, sub] = name;
      const { value } = filter;
      if (attribute === 'active' && sub === undefined) {
        if (typeof value === 'boolean') return { attribute: 'active', eq: value };
        if (typeof value === 'string' && /^(true|false)$/i.test(value))
          return { attribute: 'active', eq: value.toLowerCase() === 'true' };
        return undefined;
      }
      if (typeof value !== 'string') return undefined;
      if (sub === undefined && attribute === 'id') return { attribute: 'id', eq: value };
      if (sub === undefined && attribute === 'externalid') return { attribute: 'externalId', eq: value };
      if (attribute === 'username' && sub === undefined)
        return {
          or: [
            { attribute: 'userName', eq: value },
            { attribute: 'profileId', eq: value },
          ],
        };
      if (attribute === 'emails' && (sub === undefined || sub === 'value'))
        return { attribute: 'email', eq: value };
      return undefined;
    }
    default:
      return undefined;
  }
}

/**
 * The storage order of a SCIM `sortBy`, when a store keeps one: `id`, `externalId`,
 * `meta.created`, `meta.lastModified`, and `userName` (the stored name with `echoUserName`, else
 * the profile id the answers carry). Undefined for any other attribute: the caller sorts in memory.
 */
export function scimStorageSortKey(
  sortBy: ResolvedAttribute,
  echoUserName: boolean,
): UserSortKey | undefined {
  const name = coreName(sortBy);
  if (!name) return undefined;
  const [attribute, sub] = name;
  if (attribute === 'meta')
    return sub === 'created' ? 'createdAt' : sub === 'lastmodified' ? 'updatedAt' : undefined;
  if (sub !== undefined) return undefined;
  if (attribute === 'id') return 'id';
  if (attribute === 'externalid') return 'externalId';
  if (attribute === 'username') return echoUserName ? 'userName' : 'profileId';
  return undefined;
}

/** Where a walk's next page starts, and the walk's total when its first page was counted. */
export interface ScimWalkPosition {
  cursor: UserCursor;
  total: number;
}

/** Options of a `ScimPageCursors`. */
export interface ScimPageCursorOptions {
  /** Most positions kept; the oldest go first. @default 10000 */
  max?: number;
  /** How long a position is kept, in milliseconds. @default 600000 (10 minutes) */
  ttlMs?: number;
}

/**
 * The keyset positions where the next pages of recent walks start, by walk and `startIndex`
 * (see the module comment). Owned by one SCIM router; bounded in number and age; no timers.
 */
export class ScimPageCursors {
  private readonly entries = new Map<string, { next: ScimWalkPosition; expires: number }>();
  private readonly max: number;
  private readonly ttlMs: number;

  constructor(options: ScimPageCursorOptions = {}) {
    this.max = options.max ?? 10_000;
    this.ttlMs = options.ttlMs ?? 600_000;
  }

  /** The position from which the walk's page at `startIndex` starts, when a previous page left it. */
  find(walk: string, startIndex: number, now = Date.now()): ScimWalkPosition | undefined {
    const key = `${walk}\u0000${startIndex}`;
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expires <= now) {
      this.entries.delete(key);
      return undefined;
    }
    // Kept (a page asked again, a retry, starts from the same position) and made the newest.
    this.remember(walk, startIndex, entry.next, now);
    return entry.next;
  }

  /** Records that the walk's page at `startIndex` starts right after `next.cursor`. */
  remember(walk: string, startIndex: number, next: ScimWalkPosition, now = Date.now()): void {
    const key = `${walk}\u0000${startIndex}`;
    this.entries.delete(key);
    this.entries.set(key, { next, expires: now + this.ttlMs });
    while (this.entries.size > this.max) {
      const oldest = this.entries.keys().next().value;
      if (oldest === undefined) break;
      this.entries.delete(oldest);
    }
  }

  /** Number of positions kept (expired ones not yet dropped included). */
  get size(): number {
    return this.entries.size;
  }
}
