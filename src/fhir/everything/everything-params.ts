import { parseDateRange } from '../../common/date-range.js';
import { isResourceType, isValidId } from '../../common/resource-types.js';
import { FhirError } from '../../http/http-error.js';
import type { IgnoredParameter } from '../../search/parse.js';
import { instantMicros } from '../../storage/result-page.js';

/**
 * The parameters of `Patient/$everything` (R4 OperationDefinition `Patient-everything`), and the
 * opaque `_cursor` its `next` links carry.
 * @see https://hl7.org/fhir/R4/patient-operation-everything.html
 */

/** The parsed parameters of one `$everything` request. */
export interface EverythingParams {
  /** `_since`: only resources whose `meta.lastUpdated` is at or after it (epoch ms). */
  since?: number;
  /**
   * `start` / `end` (care dates, R4 `date`): as the search values `ge<start>` and `le<end>` of each
   * type's `date` search parameter.
   */
  start?: string;
  end?: string;
  /** `_type`: only resources of these types (each listed once, in request order). */
  types?: string[];
  /** Page size: `_count`, else the router's default, at most its maximum. */
  count: number;
  /** Where the page starts (`_cursor` of a `next` link). */
  cursor?: EverythingCursor;
  /** The parameters applied, without paging: what a `self` / `next` link repeats. */
  applied: [string, string][];
  /** Parameters ignored (`Prefer: handling=lenient` only: each `not-supported`). */
  ignored: IgnoredParameter[];
}

/**
 * A position in the walk of `$everything`: the patient (type level only), the resource type, and
 * the resource's place in that type's order (`lastUpdated` and id for compartment types, the id
 * alone for the referenced types).
 */
export interface EverythingCursor {
  patient?: string;
  type: string;
  id: string;
  lastUpdated?: string;
}

/** Options of {@link parseEverythingParams}. */
export interface EverythingParamOptions {
  /** Ignore (and list) unknown parameters instead of answering 400. @default false */
  lenient?: boolean;
  /** Page size without `_count`. @default 20 */
  defaultCount?: number;
  /** Largest page size: a larger `_count` is lowered to it. @default 1000 */
  maxCount?: number;
}

/** Longest `_cursor` accepted. */
const MAX_CURSOR = 512;

const DATE = /^\d{4}(?:-\d{2}(?:-\d{2})?)?$/;
const INSTANT = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})$/;

const invalid = (name: string, why: string): FhirError =>
  new FhirError(400, 'invalid', why, { expression: [name] });

/** The `_cursor` text of a position. */
export function encodeEverythingCursor(cursor: EverythingCursor): string {
  const json = {
    ...(cursor.patient === undefined ? {} : { p: cursor.patient }),
    t: cursor.type,
    i: cursor.id,
    ...(cursor.lastUpdated === undefined ? {} : { u: cursor.lastUpdated }),
  };
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

/** Reads a `_cursor` made by {@link encodeEverythingCursor}; 400 when it is not one. */
export function decodeEverythingCursor(text: string): EverythingCursor {
  const bad = invalid('_cursor', '_cursor is not a paging cursor of this $everything');
  if (text.length > MAX_CURSOR || !/^[A-Za-z0-9_-]+$/.test(text)) throw bad;
  let json: unknown;
  try {
    json = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw bad;
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw bad;
  const { p, t, i, u } = json as Record<string, unknown>;
  if (typeof t !== 'string' || !isResourceType(t)) throw bad;
  if (typeof i !== 'string' || !isValidId(i)) throw bad;
  if (p !== undefined && (typeof p !== 'string' || !isValidId(p))) throw bad;
  if (u !== undefined && (typeof u !== 'string' || !isInstant(u))) throw bad;
  return {
    ...(p === undefined ? {} : { patient: p }),
    type: t,
    id: i,
    ...(u === undefined ? {} : { lastUpdated: u }),
  };
}

/**
 * Reads the parameters of a `$everything` request (the query string, or a form body): `_since` (an
 * instant, with seconds and a time zone), `_type` (comma-separated resource types, repeatable),
 * `_count` (a positive integer), `_cursor`, and `start` / `end` (dates: `2024`, `2024-01` or
 * `2024-01-31`); each but `_type` at most once. A malformed or repeated value answers 400
 * (`invalid`); an unknown parameter 400 (`not-supported`) unless `lenient`.
 */
export function parseEverythingParams(
  params: Iterable<readonly [string, string]>,
  options: EverythingParamOptions = {},
): EverythingParams {
  const defaultCount = options.defaultCount ?? 20;
  const maxCount = options.maxCount ?? 1000;
  const out: EverythingParams = { count: Math.min(defaultCount, maxCount), applied: [], ignored: [] };
  const seen = new Set<string>();
  const once = (name: string): void => {
    if (seen.has(name)) throw invalid(name, `${name} may be given once`);
    seen.add(name);
  };
  for (const [name, value] of params) {
    switch (name) {
      case '_since': {
        once(name);
        const range = INSTANT.test(value) ? parseDateRange(value) : undefined;
        if (!range) throw invalid(name, '_since must be an instant, such as 2024-01-31T12:00:00Z');
        out.since = range.start;
        out.applied.push([name, value]);
        break;
      }
      case 'start':
      case 'end': {
        once(name);
        if (!DATE.test(value) || !parseDateRange(value)) {
          throw invalid(name, `${name} must be a date, such as 2024-01-31`);
        }
        out[name] = value;
        out.applied.push([name, value]);
        break;
      }
      case '_type': {
        const types = value.split(',').map((t) => t.trim());
        for (const type of types) {
          if (!isResourceType(type)) throw invalid(name, `_type names an unknown resource type: ${type}`);
          out.types ??= [];
          if (!out.types.includes(type)) out.types.push(type);
        }
        out.applied.push([name, value]);
        break;
      }
      case '_count': {
        once(name);
        if (!/^\d{1,9}$/.test(value) || Number(value) < 1) {
          throw invalid(name, '_count must be a positive integer');
        }
        out.count = Math.min(Number(value), maxCount);
        break;
      }
      case '_cursor':
        once(name);
        out.cursor = decodeEverythingCursor(value);
        break;
      default:
        if (!options.lenient) {
          throw new FhirError(400, 'not-supported', `$everything does not support the parameter ${name}`, {
            expression: [name],
          });
        }
        out.ignored.push({ name, reason: 'not-supported' });
    }
  }
  return out;
}
