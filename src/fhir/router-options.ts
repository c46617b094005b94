import { resolveMaxJsonDepth } from '../http/json-depth.js';
import {
  nonNegativeNumber,
  oneOf,
  optionError,
  positiveInteger,
  positiveLimit,
  sizeInBytes,
  sizeOption,
} from '../common/options.js';
import {
  checkRouterOptions,
  type BodyLimitOptions,
  type CommonRouterOptions,
  type OwnOptionKeys,
} from '../http/router-options.js';
import type { CapabilityContribution } from './capability/capability-statement.js';
import { DEFAULT_MAX_ACCURATE_TOTAL } from './search/search-total.js';
import { DEFAULT_PATCH_LIMITS, type PatchLimits } from './patch/patch-limits.js';
import type { NdjsonUploadOptions } from './upload/ndjson-upload.js';
import type { ResourceValidator } from './validation/structure-validator.js';
import { r4Terminology } from '../terminology/r4-terminology.js';
import { DEFAULT_MAX_TERMINOLOGY_CODES } from './search/resolve-terminology.js';
import type { Terminology } from '../terminology/terminology-types.js';
import type { SearchAdmissionLimits } from './search/search-admission.js';
import { SEARCH_COST_DEFAULTS, type SearchCostLimits } from '../search/cost-limits.js';
import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';

/** Options of `fhirRouter`. */
export interface FhirRouterOptions extends CommonRouterOptions, BodyLimitOptions {
  /**
   * Largest JSON request body (a resource or a batch/transaction Bundle), bytes or a size string;
   * larger bodies answer 413.
   * @default '16mb'
   */
  bodyLimit?: number | string;
  /**
   * Largest batch or transaction Bundle accepted when its body is over `bodyLimit` (declared by
   * `Content-Length`, UTF-8, not compressed): such a body is parsed as a stream, its entries
   * assembled one by one, so that the text is never held whole. Bytes or a size string; larger
   * Bundles answer 413. Set it to `bodyLimit` to accept no larger Bundle.
   * @default '1gb'
   */
  streamedBundleLimit?: number | string;
  /**
   * Deepest nesting of objects and arrays accepted in a JSON body (a resource or a Bundle) and in
   * each line of an NDJSON upload; deeper JSON answers 400 (or is a rejected line), checked on the
   * parsed value before any other code walks it.
   * @default 100
   */
  maxJsonDepth?: number;
  /** Page size of a search without `_count`. @default 20 */
  defaultCount?: number;
  /** Largest page size; a larger `_count` is lowered to it. @default 1000 */
  maxCount?: number;
  /** Most entries in a batch or transaction Bundle (413 above). @default 10000 */
  maxBundleEntries?: number;
  /**
   * Most operations in one patch (a JSON Patch, or the `operation` parameters of a FHIRPath Patch),
   * over HTTP or in a batch or transaction entry; more answer 413 (`too-costly`) before any is
   * applied.
   * @default 1000
   */
  maxPatchOperations?: number;
  /**
   * Largest resource a patch may leave, bytes (of JSON, strings by their UTF-8 length) or a size
   * string. It is measured as the patch applies: each operation that adds to the resource (JSON
   * Patch `add`, `replace`, `copy`; FHIRPath Patch `add`, `insert`, `replace`) counts what it
   * writes before it is applied, and one that would pass the limit answers 413 (`too-costly`),
   * naming the operation, with nothing written. Removed and replaced values are not taken off, so
   * the measure is an upper bound. A patch made of its body's values cannot grow a resource by more
   * than the body, so twice `bodyLimit` admits any patch of a resource the body limit admits; a JSON
   * Patch `copy` doubles what it copies, and twenty copies of one element would otherwise build a
   * resource a million times its size.
   * @default twice `bodyLimit` ('32mb' with the default `bodyLimit`)
   */
  maxPatchedResourceSize?: number | string;
  /**
   * What a successful create or update answers, and what each entry of a batch or transaction
   * answer carries, when the request sends no `Prefer: return=`: the stored resource
   * (`representation`), or none (`minimal`: a create or update answers with no body, a Bundle
   * entry with its `fullUrl` and `response` only). A request's own `Prefer: return=` always wins.
   * `minimal` suits a server that mostly takes loads (the answer to a large Bundle is then a
   * fraction of its size) whose clients do not read the resources back.
   * @see https://hl7.org/fhir/R4/http.html#prefer
   * @default 'representation'
   */
  defaultReturn?: 'representation' | 'minimal';
  /**
   * Conditional delete (`DELETE [base]/[type]?[criteria]`, and batch or transaction entries so
   * addressed): `single` deletes the one match and answers 412 when several match; `multiple`
   * deletes every match (at most `maxBundleEntries`; 412 when more match); `off` answers 405 (in an
   * entry, 405 as its status). The CapabilityStatement says which.
   * @see https://hl7.org/fhir/R4/http.html#cdelete
   * @default 'single'
   */
  conditionalDelete?: 'single' | 'multiple' | 'off';
  /** Limits of the multipart NDJSON upload (`POST [base]` with `multipart/form-data`). @default {} (1 GiB per file, 20 files, batches of 2000 lines or 8 MiB) */
  upload?: NdjsonUploadOptions;
  /**
   * What other areas add to `GET [base]/metadata`: operations (bulk `$export`), the SMART security
   * service, instantiated statements, and a final `customize` hook. Applied in order.
   * @default []
   */
  capabilities?: CapabilityContribution[];
  /** `software` of the CapabilityStatement. @default { name: 'fhir-platform-kit' } */
  software?: { name: string; version?: string };
  /**
   * Validates resources written to projects with `strictMode: true`. The default loads the FHIR R4
   * structure definitions lazily, once per router, on the first strict write.
   * @default r4StructureValidator()
   */
  validator?: ResourceValidator;
  /**
   * The terminology service of `$expand`, `$lookup`, `$validate-code`, `$subsumes`, the binding
   * checks of validation and the token modifiers `:in`, `:not-in`, `:below`, `:above`. The default
   * knows the R4 code systems and value sets (loaded lazily, once per process, on first use) and
   * each project's own `CodeSystem` and `ValueSet` resources.
   * @default r4Terminology()
   */
  terminology?: Terminology;
  /**
   * How many costly reads of one project (searches, `POST _search`, `$everything`, history
   * listings, the searches of a batch or transaction) run at once, and how many may wait their
   * turn and for how long; beyond, 429 `throttled` with `Retry-After`. Each project has its own
   * turns: one project's load never takes another's (see docs/deployment.md, "Tenant fairness").
   * @default { maxConcurrent: 4, maxQueued: 32, maxWaitMs: 10000 }
   */
  searchAdmission?: Partial<SearchAdmissionLimits>;
  /**
   * Milliseconds a costly read may run from the start of its turn: past it the store stops it and
   * it answers 400 `too-costly` (never a 503). Shorter than a PostgreSQL store's statement timeout.
   * @default 10000
   */
  searchTimeoutMs?: number;
  /**
   * Bounds on what a search may ask, refused (400 `too-costly`) before it runs: `_sort` keys,
   * parameters, nested `_has`, `_offset`; how far an exact total counts (400 `too-costly` past
   * it); and how much `_include` / `_revinclude` add to a page (a warning beyond). The
   * CapabilityStatement states them. @default { maxSortKeys: 5, maxFilters: 30, maxHasDepth: 2, maxOffset: 10000, maxAccurateTotal: 100000, maxIncluded: 1000, maxIncludeDepth: 3, maxTerminologyCodes: 10000 }
   */
  searchLimits?: FhirSearchLimits;
  /**
   * When true, requests this router has no route for (unknown types, `$operations`, other paths) go
   * on to the next handler instead of answering a 404 OperationOutcome; mount other routers that
   * share the base path (bulk export, `Project/$init`) before or after it accordingly.
   * @default false
   */
  fallthrough?: boolean;
}

/**
 * Bounds on what a search may ask (`SearchCostLimits`, refused with 400 `too-costly` before it
 * runs), and on what `_include` / `_revinclude` add to one page (cut with a `too-costly` warning).
 */
export interface FhirSearchLimits extends SearchCostLimits {
  /**
   * Most matches an exact total counts (`_total=accurate`, `_summary=count`, `_count=0`): when more
   * match, the search answers 400 `too-costly` naming `_total`, having counted no further. A search
   * without `_total` counts nothing, and `_total=estimate` is never refused. `Infinity`: no bound.
   * @see https://hl7.org/fhir/R4/search.html#total
   * @default 100000
   */
  maxAccurateTotal?: number;
  /** Most resources `_include` / `_revinclude` add to one page. @default 1000 */
  maxIncluded?: number;
  /** Most levels `:iterate` follows (the first level included). @default 3 */
  maxIncludeDepth?: number;
  /**
   * Most codes one token terminology filter may stand for: the codes of the value sets of an `:in`
   * / `:not-in`, or of the hierarchy of a `:below` / `:above`, which the search is answered with;
   * beyond it, 400 `too-costly` naming the parameter.
   * @see https://hl7.org/fhir/R4/search.html#token
   * @default 10000
   */
  maxTerminologyCodes?: number;
}

/** Options with every default filled in. */
export interface ResolvedFhirRouterOptions
  extends
    Required<
      Omit<
        FhirRouterOptions,
        | 'baseUrl'
        | 'onError'
        | 'software'
        | 'logger'
        | 'auditTrail'
        | 'streamedBundleLimit'
        | 'searchAdmission'
        | 'searchLimits'
        | 'maxPatchOperations'
        | 'maxPatchedResourceSize'
      >
    >,
    Pick<FhirRouterOptions, 'baseUrl' | 'onError' | 'software' | 'logger' | 'auditTrail'> {
  /** In bytes. */
  streamedBundleLimit: number;
  searchAdmission: SearchAdmissionLimits;
  searchLimits: Required<FhirSearchLimits>;
  /** `maxPatchOperations` and `maxPatchedResourceSize` (in bytes). */
  patchLimits: PatchLimits;
}

const ADMISSION_KEYS: OptionKeys<SearchAdmissionLimits> = {
  maxConcurrent: true,
  maxQueued: true,
  maxWaitMs: true,
};

const SEARCH_LIMIT_KEYS: OptionKeys<FhirSearchLimits> = {
  maxSortKeys: true,
  maxFilters: true,
  maxHasDepth: true,
  maxOffset: true,
  maxAccurateTotal: true,
  maxIncluded: true,
  maxIncludeDepth: true,
  maxTerminologyCodes: true,
};

function resolveSearchAdmission(options: Partial<SearchAdmissionLimits> = {}): SearchAdmissionLimits {
  checkOptionKeys(OWNER, options, ADMISSION_KEYS, 'searchAdmission.');
  return {
    maxConcurrent: positiveInteger(OWNER, 'searchAdmission.maxConcurrent', options.maxConcurrent, 4),
    maxQueued: nonNegativeNumber(OWNER, 'searchAdmission.maxQueued', options.maxQueued, 32),
    maxWaitMs: nonNegativeNumber(OWNER, 'searchAdmission.maxWaitMs', options.maxWaitMs, 10_000),
  };
}

/** `searchLimits.maxAccurateTotal`: a positive integer or `Infinity`. */
function resolveMaxAccurateTotal(value: number | undefined): number {
  const name = 'searchLimits.maxAccurateTotal';
  const bound = positiveLimit(OWNER, name, value, DEFAULT_MAX_ACCURATE_TOTAL);
  if (bound !== Infinity && !Number.isSafeInteger(bound))
    optionError(OWNER, name, `${name} must be a positive integer or Infinity`);
  return bound;
}

function resolveSearchLimits(options: FhirSearchLimits = {}): Required<FhirSearchLimits> {
  checkOptionKeys(OWNER, options, SEARCH_LIMIT_KEYS, 'searchLimits.');
  const limit = (name: keyof FhirSearchLimits, fallback: number): number =>
    positiveInteger(OWNER, `searchLimits.${name}`, options[name], fallback);
  return {
    maxSortKeys: limit('maxSortKeys', SEARCH_COST_DEFAULTS.maxSortKeys),
    maxFilters: limit('maxFilters', SEARCH_COST_DEFAULTS.maxFilters),
    maxHasDepth: limit('maxHasDepth', SEARCH_COST_DEFAULTS.maxHasDepth),
    maxOffset: nonNegativeNumber(
      OWNER,
      'searchLimits.maxOffset',
      options.maxOffset,
      SEARCH_COST_DEFAULTS.maxOffset,
    ),
    maxAccurateTotal: resolveMaxAccurateTotal(options.maxAccurateTotal),
    maxIncluded: limit('maxIncluded', 1000),
    maxIncludeDepth: limit('maxIncludeDepth', 3),
    maxTerminologyCodes: limit('maxTerminologyCodes', DEFAULT_MAX_TERMINOLOGY_CODES),
  };
}

const OWNER = 'fhirRouter';

const FHIR_ROUTER_KEYS: OwnOptionKeys<FhirRouterOptions> = {
  streamedBundleLimit: true,
  maxJsonDepth: true,
  defaultCount: true,
  maxCount: true,
  maxBundleEntries: true,
  maxPatchOperations: true,
  maxPatchedResourceSize: true,
  defaultReturn: true,
  conditionalDelete: true,
  upload: true,
  capabilities: true,
  software: true,
  validator: true,
  terminology: true,
  searchAdmission: true,
  searchTimeoutMs: true,
  searchLimits: true,
  fallthrough: true,
};

/** Fills in defaults and fails fast on bad options. */
export function resolveFhirRouterOptions(
  options: FhirRouterOptions,
  defaultValidator: () => ResourceValidator,
): ResolvedFhirRouterOptions {
  const { onError, bodyLimit } = checkRouterOptions(OWNER, options, FHIR_ROUTER_KEYS, {
    authenticate: true,
    bodyLimit: '16mb',
  });
  const maxCount = positiveInteger(OWNER, 'maxCount', options.maxCount, 1000);
  const defaultCount = positiveInteger(OWNER, 'defaultCount', options.defaultCount, 20);
  if (defaultCount > maxCount) optionError(OWNER, 'defaultCount', 'defaultCount must not exceed maxCount');
  return {
    ...options,
    bodyLimit,
    streamedBundleLimit: sizeInBytes(
      sizeOption(OWNER, 'streamedBundleLimit', options.streamedBundleLimit, '1gb'),
    ),
    maxJsonDepth: resolveMaxJsonDepth(OWNER, options.maxJsonDepth),
    defaultCount,
    maxCount,
    maxBundleEntries: positiveInteger(OWNER, 'maxBundleEntries', options.maxBundleEntries, 10_000),
    patchLimits: resolvePatchLimits(options, sizeInBytes(bodyLimit)),
    defaultReturn:
      oneOf(OWNER, 'defaultReturn', options.defaultReturn, ['representation', 'minimal']) ?? 'representation',
    conditionalDelete:
      oneOf(OWNER, 'conditionalDelete', options.conditionalDelete, ['single', 'multiple', 'off']) ?? 'single',
    upload: { ...(options.upload ?? {}) },
    capabilities: [...(options.capabilities ?? [])],
    validator: options.validator ?? defaultValidator(),
    terminology: options.terminology ?? r4Terminology(),
    searchAdmission: resolveSearchAdmission(options.searchAdmission),
    searchTimeoutMs: positiveInteger(OWNER, 'searchTimeoutMs', options.searchTimeoutMs, 10_000),
    searchLimits: resolveSearchLimits(options.searchLimits),
    fallthrough: options.fallthrough ?? false,
    onError,
  };
}

/** `maxPatchOperations` and `maxPatchedResourceSize`, checked; the size defaults to twice `bodyLimit` bytes. */
function resolvePatchLimits(options: FhirRouterOptions, bodyLimit: number): PatchLimits {
  const { maxPatchOperations, maxPatchedResourceSize } = options;
  return {
    maxOperations: positiveInteger(
      OWNER,
      'maxPatchOperations',
      maxPatchOperations,
      DEFAULT_PATCH_LIMITS.maxOperations,
    ),
    maxResourceSize: sizeInBytes(
      sizeOption(OWNER, 'maxPatchedResourceSize', maxPatchedResourceSize, 2 * bodyLimit),
    ),
  };
}
