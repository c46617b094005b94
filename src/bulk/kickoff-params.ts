import { isResourceType, isValidId } from '../common/resource-types.js';
import { FhirError, type FhirIssueCode } from '../http/http-error.js';
import type { SearchRegistry } from '../search/definitions.js';
import { parseTypeFilter, type TypeFilterSearch } from './type-filter.js';

/** The three kick-off endpoints (Bulk Data 2.0.0 and 3.0.0, "Bulk Data Kick-off Request"). */
export type ExportLevel = 'system' | 'patient' | 'group';

/** Output formats the server accepts for `_outputFormat`; all mean FHIR NDJSON. */
export const NDJSON_FORMATS: readonly string[] = ['application/fhir+ndjson', 'application/ndjson', 'ndjson'];

/**
 * Values of `includeAssociatedData` defined by the IG (CodeSystem `include-associated-data`), all
 * supported: Provenance resources whose `target` is an exported resource.
 */
export type AssociatedData = 'LatestProvenanceResources' | 'RelevantProvenanceResources';

const ASSOCIATED_DATA_VALUES: ReadonlySet<string> = new Set<AssociatedData>([
  'LatestProvenanceResources',
  'RelevantProvenanceResources',
]);

/**
 * How far in the future `_since` may lie (ms) before it is refused: allows for the client's clock
 * running a little ahead of the server's.
 */
export const SINCE_CLOCK_SKEW_MS = 5000;

/** One `OperationOutcome.issue` reporting an ignored parameter under `handling=lenient`. */
export interface KickoffIssue {
  severity: 'error' | 'warning';
  code: string;
  /** Human-readable explanation. */
  text: string;
  /** The offending parameter, e.g. `_type`. */
  expression: string[];
}

/** The parsed kick-off request: plain JSON, persisted with the job and sent to the worker. */
export interface ExportParams {
  level: ExportLevel;
  /** The Group id of a Group-level export. */
  groupId?: string;
  /** Always `application/fhir+ndjson` (every accepted spelling is normalised). */
  outputFormat: 'application/fhir+ndjson';
  /** `_since` as given (FHIR instant). */
  since?: string;
  /** `_since` as epoch milliseconds. */
  sinceMs?: number;
  /** `_until` as given (FHIR instant; Bulk Data 3.0.0). */
  until?: string;
  /**
   * `_until` as epoch milliseconds (fractional below a millisecond), when it is before the
   * kick-off: a later `_until` is capped at the kick-off, so it bounds nothing the snapshot does
   * not already bound and is left out here.
   */
  untilMs?: number;
  /** `allowPartialManifests=true` (Bulk Data 3.0.0): the status pages the manifest while the job runs. */
  allowPartialManifests?: true;
  /** `organizeOutputBy` (Bulk Data 3.0.0): files hold whole patients' compartments. */
  organizeOutputBy?: 'Patient';
  /** `_type`: the requested types in first-seen order; absent = every type the caller may read. */
  types?: string[];
  /** `_elements`: `Type.element` or `element` entries. */
  elements?: string[];
  /** `_typeFilter`: `Type?query` entries (query part URL-encoded, as sent). */
  typeFilters?: string[];
  /**
   * `typeFilters` parsed at kick-off by the search module, in the same order (plain data). Absent on
   * jobs created before it was kept: the worker then parses `typeFilters`.
   * @internal
   */
  typeFilterSearches?: TypeFilterSearch[];
  /** `patient` (POST only): Patient ids. */
  patients?: string[];
  /** `includeAssociatedData`: the values given, each once (several may be given). */
  associatedData?: AssociatedData[];
  /** `Prefer: handling=lenient`. */
  lenient: boolean;
}

/** What the router hands the parser; framework-free. */
export interface KickoffInput {
  level: ExportLevel;
  groupId?: string;
  method: string;
  /** Parsed query string (`req.query`): strings or arrays of strings. */
  query: Record<string, unknown>;
  /** POST body (a `Parameters` resource) or undefined. */
  body?: unknown;
  /** The `Prefer` header. */
  prefer?: string;
  /** The `Accept` header. */
  accept?: string;
  /** Refuse a kick-off without `Accept` or without `Prefer: respond-async` (a router option). */
  requireAsyncHeaders?: boolean;
  /** The current time (epoch ms), for the `_since` check and `_typeFilter`'s `ap` prefix. @default Date.now() */
  now?: number;
  /** The R4 search parameters `_typeFilter` is parsed with (`loadSearchRegistry()`). */
  registry: SearchRegistry;
}

export interface KickoffParseResult {
  params: ExportParams;
  /** Problems ignored under `handling=lenient`, reported in the manifest `error` files. */
  issues: KickoffIssue[];
}

// FHIR instant: https://hl7.org/fhir/R4/datatypes.html#instant
const INSTANT =
  /^([0-9]([0-9]([0-9][1-9]|[1-9]0)|[1-9]00)|[1-9]000)-(0[1-9]|1[0-2])-(0[1-9]|[1-2][0-9]|3[0-1])T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]{1,9})?(Z|(\+|-)((0[0-9]|1[0-3]):[0-5][0-9]|14:00))$/;

const ELEMENT_NAME = /^[a-z][A-Za-z0-9]*(\[x\])?$/;

/** Parses `Prefer` (RFC 7240): a comma list of preferences; unknown ones are ignored. */
export function parsePrefer(header: string | undefined): {
  handling?: 'lenient' | 'strict';
  invalid?: string;
  respondAsync?: true;
} {
  let handling: 'lenient' | 'strict' | undefined;
  let invalid: string | undefined;
  let respondAsync: true | undefined;
  for (const part of (header ?? '').split(',')) {
    const token = part.split(';')[0]!.trim();
    if (token === '') continue;
    const eq = token.indexOf('=');
    const name = (eq < 0 ? token : token.slice(0, eq)).trim().toLowerCase();
    const value =
      eq < 0
        ? ''
        : token
            .slice(eq + 1)
            .trim()
            .replace(/^"(.*)"$/, '$1');
    if (name === 'handling') {
      if (value === 'lenient' || value === 'strict') handling = value;
      else invalid = `handling=${value}`;
    } else if (name === 'respond-async') respondAsync = true;
  }
  return { handling, invalid, respondAsync };
}

function acceptable(accept: string | undefined): boolean {
  if (accept === undefined || accept.trim() === '') return true;
  return accept.split(',').some((part) => {
    const type = part.split(';')[0]!.trim().toLowerCase();
    return [
      'application/fhir+json',
      'application/json',
      'application/*',
      '*/*',
      'json',
      'application/json+fhir',
    ].includes(type);
  });
}

/** Collects raw string values of each parameter from the query and a `Parameters` body. */
function collect(input: KickoffInput): Map<string, string[]> {
  const values = new Map<string, string[]>();
  const add = (name: string, value: string): void => {
    const list = values.get(name);
    if (list) list.push(value);
    else values.set(name, [value]);
  };
  for (const [name, raw] of Object.entries(input.query)) {
    for (const value of Array.isArray(raw) ? raw : [raw]) {
      if (typeof value !== 'string') throw invalid(name, `Parameter ${name} is malformed`);
      add(name, value);
    }
  }
  if (input.method === 'POST' && input.body !== undefined) {
    const body = input.body as { resourceType?: unknown; parameter?: unknown };
    if (typeof body !== 'object' || body === null || body.resourceType !== 'Parameters') {
      throw new FhirError(400, 'invalid', 'The kick-off body must be a Parameters resource');
    }
    if (body.parameter !== undefined && !Array.isArray(body.parameter)) {
      throw new FhirError(400, 'invalid', 'Parameters.parameter must be an array');
    }
    for (const entry of (body.parameter ?? []) as unknown[]) {
      const parameter = (typeof entry === 'object' && entry !== null ? entry : {}) as Record<string, unknown>;
      const name = parameter.name;
      if (typeof name !== 'string') throw new FhirError(400, 'invalid', 'Every parameter needs a name');
      const valueKey = Object.keys(parameter).find((key) => key.startsWith('value'));
      const value = valueKey === undefined ? undefined : parameter[valueKey];
      if (valueKey === 'valueReference') {
        const reference = (value as { reference?: unknown } | null)?.reference;
        if (typeof reference !== 'string') throw invalid(name, `Parameter ${name} needs a reference`);
        add(name, reference);
      } else if (typeof value === 'string') {
        add(name, value);
      } else if (typeof value === 'boolean') {
        add(name, String(value));
      } else {
        throw invalid(name, `Parameter ${name} needs a string or boolean value`);
      }
    }
  }
  return values;
}

function invalid(parameter: string, text: string): FhirError {
  return new FhirError(400, 'invalid', text, { expression: [parameter] });
}

function commaList(values: string[]): string[] {
  return values
    .flatMap((v) => v.split(','))
    .map((v) => v.trim())
    .filter((v) => v !== '');
}

/**
 * Parses and validates a kick-off request (Bulk Data 2.0.0 "Query Parameters", and the 3.0.0
 * `_until`, `allowPartialManifests` and `organizeOutputBy`). Unsupported or invalid values throw a
 * 400 `FhirError`, except under `Prefer: handling=lenient`, where they are dropped and returned as
 * `issues`. Always a 400, whatever the handling: a `_since` more than {@link SINCE_CLOCK_SKEW_MS}
 * in the future, a malformed or repeated `_until` or one before `_since`, an invalid `Prefer`, and
 * (with `requireAsyncHeaders`) a missing `Accept` or `Prefer: respond-async`.
 */
export function parseKickoff(input: KickoffInput): KickoffParseResult {
  const prefer = parsePrefer(input.prefer);
  if (prefer.invalid) throw new FhirError(400, 'invalid', `Unsupported preference ${prefer.invalid}`);
  const lenient = prefer.handling === 'lenient';
  if (input.requireAsyncHeaders) {
    // Bulk Data 2.0.0 "Headers": both are required of the client; refused only when the router
    // is configured so, since common clients send neither.
    if (input.accept === undefined || input.accept.trim() === '')
      throw new FhirError(400, 'required', 'The Accept header is required', { expression: ['Accept'] });
    if (!prefer.respondAsync)
      throw new FhirError(400, 'required', 'Prefer: respond-async is required', { expression: ['Prefer'] });
  }
  const issues: KickoffIssue[] = [];
  /** Throws in strict mode; records the issue in lenient mode. */
  const reject = (parameter: string, text: string, code: FhirIssueCode = 'not-supported'): void => {
    if (!lenient) throw new FhirError(400, code, text, { expression: [parameter] });
    issues.push({ severity: 'warning', code, text, expression: [parameter] });
  };

  if (!acceptable(input.accept)) reject('Accept', 'Only application/fhir+json is supported in Accept');

  const values = collect(input);
  const now = input.now ?? Date.now();
  const params: ExportParams = { level: input.level, outputFormat: 'application/fhir+ndjson', lenient };
  if (input.groupId !== undefined) params.groupId = input.groupId;

  for (const [name, list] of values) {
    switch (name) {
      case '_outputFormat': {
        for (const value of list) {
          if (!NDJSON_FORMATS.includes(value.trim().toLowerCase())) {
            reject('_outputFormat', `Unsupported _outputFormat ${value}`);
          }
        }
        break;
      }
      case '_since': {
        if (list.length > 1) {
          reject('_since', '_since may be given once', 'invalid');
          break;
        }
        const { value, ms } = parseInstant(list[0]!);
        if (Number.isNaN(ms)) reject('_since', '_since must be a FHIR instant', 'invalid');
        else if (ms > now + SINCE_CLOCK_SKEW_MS) {
          // Refused even under lenient handling: dropping it would turn an incremental export into
          // a full one, and keeping it would answer an empty export that looks like a success.
          throw invalid('_since', '_since must not be in the future');
        } else {
          params.since = value;
          params.sinceMs = ms;
        }
        break;
      }
      case '_until':
      case 'allowPartialManifests':
      case 'organizeOutputBy':
        parseVersion3Option(params, name, list, reject, now);
        break;
      case '_type': {
        const requested = commaList(list);
        // An empty `_type=` is no restriction.
        if (requested.length === 0) break;
        const types: string[] = [];
        for (const type of requested) {
          if (!isResourceType(type)) reject('_type', `Unknown resource type ${type}`);
          else if (!types.includes(type)) types.push(type);
        }
        // Under lenient handling an all-invalid list exports nothing rather than everything.
        params.types = types;
        break;
      }
      case '_elements': {
        const elements: string[] = [];
        for (const element of commaList(list)) {
          const dot = element.indexOf('.');
          const type = dot < 0 ? undefined : element.slice(0, dot);
          const name = dot < 0 ? element : element.slice(dot + 1);
          if ((type !== undefined && !isResourceType(type)) || !ELEMENT_NAME.test(name)) {
            reject('_elements', `Unsupported _elements entry ${element}`, 'invalid');
          } else if (!elements.includes(element)) elements.push(element);
        }
        if (elements.length > 0) params.elements = elements;
        break;
      }
      case '_typeFilter': {
        const filters: string[] = [];
        const searches: TypeFilterSearch[] = [];
        for (const filter of commaList(list)) {
          const parsed = parseTypeFilter(input.registry, filter, now);
          if ('problem' in parsed) reject('_typeFilter', parsed.problem, parsed.code);
          else {
            filters.push(filter);
            searches.push(parsed.search);
          }
        }
        if (filters.length > 0) {
          params.typeFilters = filters;
          params.typeFilterSearches = searches;
        }
        break;
      }
      case 'patient': {
        if (input.level === 'system') {
          reject('patient', 'The patient parameter does not apply to a system-level export');
          break;
        }
        if (input.method !== 'POST') {
          reject('patient', 'The patient parameter is accepted in POST requests only');
          break;
        }
        const ids: string[] = [];
        for (const reference of commaList(list)) {
          const id = /^(?:.*\/)?Patient\/([^/]+)$/.exec(reference)?.[1];
          if (id === undefined || !isValidId(id))
            reject('patient', `Invalid patient reference ${reference}`, 'invalid');
          else if (!ids.includes(id)) ids.push(id);
        }
        params.patients = ids;
        break;
      }
      case 'includeAssociatedData': {
        const values: AssociatedData[] = [];
        for (const value of commaList(list)) {
          if (ASSOCIATED_DATA_VALUES.has(value)) {
            if (!values.includes(value as AssociatedData)) values.push(value as AssociatedData);
          } else {
            // `_`-prefixed values are server-defined (none here); anything else is unknown.
            reject(
              'includeAssociatedData',
              value.startsWith('_')
                ? `includeAssociatedData=${value} is not supported`
                : `Unknown includeAssociatedData ${value}`,
            );
          }
        }
        if (values.length > 0) params.associatedData = values;
        break;
      }
      default:
        reject(name, `Unknown parameter ${name}`);
    }
  }
  if (params.organizeOutputBy && params.associatedData) {
    // Provenance is in no patient's compartment (but a Patient's own): it has no block to go in.
    reject('includeAssociatedData', 'includeAssociatedData is not supported with organizeOutputBy');
    delete params.associatedData;
  }
  const untilMs = params.until === undefined ? undefined : parseInstant(params.until).ms;
  if (untilMs !== undefined && params.sinceMs !== undefined && untilMs < params.sinceMs)
    throw invalid('_until', '_until must not be before _since');
  return { params, issues };
}

/**
 * The Bulk Data 3.0.0 kick-off options (`_until`, `allowPartialManifests`, `organizeOutputBy`) into
 * `params`; `reject` throws or, under lenient handling, records the issue.
 */
function parseVersion3Option(
  params: ExportParams,
  name: string,
  list: string[],
  reject: (parameter: string, text: string, code?: FhirIssueCode) => void,
  now: number,
): void {
  switch (name) {
    case '_until': {
      // Refused whatever the handling: without it the export would hold more than was asked.
      if (list.length > 1) throw invalid('_until', '_until may be given once');
      const { value, ms } = parseInstant(list[0]!);
      if (Number.isNaN(ms)) throw invalid('_until', '_until must be a FHIR instant');
      params.until = value;
      if (ms < now) params.untilMs = ms;
      break;
    }
    case 'allowPartialManifests': {
      const value = list.length === 1 ? list[0]!.trim() : '';
      if (value === 'true') params.allowPartialManifests = true;
      else if (value !== 'false')
        reject('allowPartialManifests', 'allowPartialManifests must be given once, true or false', 'invalid');
      break;
    }
    case 'organizeOutputBy': {
      const value = list.length === 1 ? list[0]!.trim() : '';
      if (value === 'Patient') params.organizeOutputBy = 'Patient';
      else if (list.length === 1 && isResourceType(value))
        reject('organizeOutputBy', `organizeOutputBy=${value} is not supported (only Patient)`);
      else reject('organizeOutputBy', 'organizeOutputBy must be given once, a resource type', 'invalid');
      break;
    }
  }
}

/**
 * A FHIR instant as given (an unencoded "+" in a query string arrives as a space) and as epoch
 * milliseconds, with the digits below a millisecond as a fraction; `NaN` when it is not one.
 */
function parseInstant(raw: string): { value: string; ms: number } {
  const value = raw.trim().replace(/ /g, '+');
  const ms = Date.parse(value);
  if (!INSTANT.test(value) || Number.isNaN(ms)) return { value, ms: NaN };
  const below = /\.[0-9]{3}([0-9]+)/.exec(value)?.[1];
  return { value, ms: below === undefined ? ms : ms + Number(`0.${below}`) };
}
