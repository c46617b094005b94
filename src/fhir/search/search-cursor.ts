import { FhirError } from '../../http/http-error.js';
import { instantMicros } from '../../storage/result-page.js';
import type { ResourceCursor, SortValue } from '../../storage/types.js';
import { isValidId } from '../../common/resource-types.js';

/*
 * `_cursor`: the position a `next` or `previous` link pages from (keyset paging), opaque to
 * clients: base64url JSON of the direction, the `_sort` it belongs to and the sort values and id of
 * the entry it was taken from. R4 leaves the paging links' form to the server.
 * @see https://hl7.org/fhir/R4/http.html#paging
 */

/** A decoded `_cursor`: page after or before `position`. */
export interface PageCursor {
  direction: 'after' | 'before';
  position: ResourceCursor;
}

/** What a cursor must carry for the search's order. */
export interface CursorShape {
  /** The `_sort` value the cursor was made for (`''`: the default order). */
  sort: string;
  /** The order needs `lastUpdated` (the `_lastUpdated` sorts). */
  lastUpdated: boolean;
  /** Number of sort values the order compares (`ResourceQuery.order`); undefined for a native sort. */
  keys: number | undefined;
}

interface CursorJson {
  d: 'a' | 'b';
  s: string;
  i: string;
  u?: string;
  k?: SortValue[];
}

/** Longest `_cursor` accepted (a long string sort value is the only thing making one long). */
const MAX_CURSOR = 4096;

/** The `_cursor` text of a position, for the search sorted by `sort`. */
export function encodeCursor(cursor: PageCursor, sort: string): string {
  const json: CursorJson = { d: cursor.direction === 'after' ? 'a' : 'b', s: sort, i: cursor.position.id };
  if (cursor.position.lastUpdated !== undefined) json.u = cursor.position.lastUpdated;
  if (cursor.position.keys !== undefined) json.k = cursor.position.keys;
  return Buffer.from(JSON.stringify(json)).toString('base64url');
}

function isInstant(text: string): boolean {
  try {
    instantMicros(text);
    return true;
  } catch {
    return false;
  }
}

const isSortValue = (v: unknown): v is SortValue =>
  v === null || typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v));

/**
 * Reads a `_cursor` made by {@link encodeCursor} for a search of `shape`; a 400 (`invalid`, naming
 * `_cursor`) when it is malformed or belongs to another `_sort`.
 */
export function decodeCursor(text: string, shape: CursorShape): PageCursor {
  const invalid = (why: string) => new FhirError(400, 'invalid', why, { expression: ['_cursor'] });
  let json: Partial<CursorJson> | null = null;
  if (text.length <= MAX_CURSOR && /^[A-Za-z0-9_-]+$/.test(text)) {
    try {
      json = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<CursorJson> | null;
    } catch {
      json = null;
    }
  }
  if (typeof json !== 'object' || json === null || (json.d !== 'a' && json.d !== 'b')) {
    throw invalid('_cursor is not a paging cursor of this server');
  }
  if (json.s !== shape.sort) throw invalid('_cursor belongs to another _sort');
  if (typeof json.i !== 'string' || !isValidId(json.i))
    throw invalid('_cursor is not a paging cursor of this server');
  const position: ResourceCursor = { id: json.i };
  if (shape.lastUpdated) {
    if (typeof json.u !== 'string' || !isInstant(json.u)) throw invalid('_cursor lacks its lastUpdated');
    position.lastUpdated = json.u;
  }
  if (shape.keys !== undefined) {
    const keys: unknown = json.k;
    if (!Array.isArray(keys) || keys.length !== shape.keys || !keys.every(isSortValue)) {
      throw invalid('_cursor does not match the sort keys');
    }
    position.keys = keys;
  }
  return { direction: json.d === 'a' ? 'after' : 'before', position };
}
