import { resolveMaxJsonDepth } from '../http/json-depth.js';
import type { CommonRouterOptions } from '../http/router-options.js';
import type { CapabilityContribution } from './capability-statement.js';
import type { NdjsonUploadOptions } from './ndjson-upload.js';
import type { ResourceValidator } from './structure-validator.js';
import { InvalidOptionError } from '../errors.js';

/** Options of `fhirRouter`. */
export interface FhirRouterOptions extends CommonRouterOptions {
  /**
   * Largest JSON request body (a resource or a batch/transaction Bundle), bytes or a size string;
   * larger bodies answer 413.
   * @default '16mb'
   */
  bodyLimit?: number | string;
  /**
   * Deepest nesting of objects and arrays accepted in a JSON body (a resource or a Bundle) and in
   * each line of an NDJSON upload; deeper JSON answers 400 (or is a rejected line), checked on the
   * raw text before parsing.
   * @default 100
   */
  maxJsonDepth?: number;
  /** Page size of a search without `_count`. @default 20 */
  defaultCount?: number;
  /** Largest page size; a larger `_count` is lowered to it. @default 1000 */
  maxCount?: number;
  /** Most entries in a batch or transaction Bundle (413 above). @default 10000 */
  maxBundleEntries?: number;
  /** Limits of the multipart NDJSON upload (`POST [base]` with `multipart/form-data`). @default {} (1 GiB per file, 20 files, batches of 500 lines) */
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
   * When true, requests this router has no route for (unknown types, `$operations`, other paths) go
   * on to the next handler instead of answering a 404 OperationOutcome; mount other routers that
   * share the base path (bulk export, `Project/$init`) before or after it accordingly.
   * @default false
   */
  fallthrough?: boolean;
}

/** Options with every default filled in. */
export interface ResolvedFhirRouterOptions
  extends
    Required<Omit<FhirRouterOptions, 'baseUrl' | 'onError' | 'software'>>,
    Pick<FhirRouterOptions, 'baseUrl' | 'onError' | 'software'> {}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1)
    throw new InvalidOptionError(`fhirRouter: ${name} must be a positive integer`);
  return value;
}

/** Fills in defaults and fails fast on bad options. */
export function resolveFhirRouterOptions(
  options: FhirRouterOptions,
  defaultValidator: () => ResourceValidator,
): ResolvedFhirRouterOptions {
  if (!options || typeof options !== 'object')
    throw new InvalidOptionError('fhirRouter: options are required');
  if (!options.storage) throw new InvalidOptionError('fhirRouter: storage is required');
  if (typeof options.authenticate !== 'function')
    throw new InvalidOptionError('fhirRouter: authenticate must be a function');
  const maxCount = positiveInteger('maxCount', options.maxCount, 1000);
  const defaultCount = positiveInteger('defaultCount', options.defaultCount, 20);
  if (defaultCount > maxCount)
    throw new InvalidOptionError('fhirRouter: defaultCount must not exceed maxCount');
  return {
    ...options,
    bodyLimit: options.bodyLimit ?? '16mb',
    maxJsonDepth: resolveMaxJsonDepth('fhirRouter', options.maxJsonDepth),
    defaultCount,
    maxCount,
    maxBundleEntries: positiveInteger('maxBundleEntries', options.maxBundleEntries, 10_000),
    upload: { ...(options.upload ?? {}) },
    capabilities: [...(options.capabilities ?? [])],
    validator: options.validator ?? defaultValidator(),
    fallthrough: options.fallthrough ?? false,
  };
}
