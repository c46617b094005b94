import type { AuditTrail } from '../audit/trail.js';
import type { Authenticate } from './principal.js';
import type { Storage } from '../storage/types.js';
import type { ErrorLogger } from './error-rendering.js';
import type { Logger } from '../common/logger.js';
import { errorSink } from './request-logging.js';
import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';
import { BASE_URL_FORM, baseUrlProblem } from '../common/base-url.js';
import { optionalFunction, optionError, requireFunction, sizeOption } from '../common/options.js';
import { requireStorage } from '../storage/storage-shape.js';

/** Options every router factory takes. */
export interface CommonRouterOptions {
  /** Where every record lives. */
  storage: Storage;
  /** Resolves the caller of each request (for example `bearerAuth(...)`). */
  authenticate: Authenticate;
  /**
   * Public origin used to build absolute URLs (`https://fhir.example.org`). When absent, the
   * request's protocol and `Host` are used (set Express `trust proxy` behind a proxy).
   * @default undefined
   */
  baseUrl?: string;
  /**
   * Receives every error answered with a 5xx status, and errors of background work.
   * @default writes to stderr (unless `logger` is given)
   */
  onError?: ErrorLogger;
  /**
   * A pino-compatible logger: every 5xx error is logged through it (`error` level, secrets
   * redacted), in addition to `onError` when both are given.
   * @default undefined
   */
  logger?: Logger;
  /**
   * The audit trail the router records its actions in (`createAuditTrail`); `fhirPlatform`
   * passes its own. Without it nothing is recorded.
   * @default undefined
   */
  auditTrail?: AuditTrail;
}

/** The option of the routers that read request bodies (each documents its own default). */
export interface BodyLimitOptions {
  /**
   * Largest request body, bytes or a size string (`'1mb'`); larger bodies answer 413.
   * @default '1mb'
   */
  bodyLimit?: number | string;
}

/** Options listed here once rather than in each router's key list. */
type SharedKey = keyof CommonRouterOptions | keyof BodyLimitOptions;

/**
 * The keys of a router's own options, as a value (see `OptionKeys`): the shared ones
 * (`CommonRouterOptions`, `bodyLimit`) are added by {@link checkRouterOptions}.
 */
export type OwnOptionKeys<T> = OptionKeys<Omit<T, SharedKey>>;

const COMMON_ROUTER_KEYS: OptionKeys<CommonRouterOptions> = {
  storage: true,
  authenticate: true,
  baseUrl: true,
  onError: true,
  logger: true,
  auditTrail: true,
};

const LOGGER_METHODS = ['error', 'warn', 'info', 'debug'] as const;

/** What a router's options say besides its own keys. */
export interface SharedOptionRules {
  /** The router takes `authenticate`, required (the token endpoint authenticates clients itself). */
  authenticate: boolean;
  /** The router reads request bodies: `bodyLimit` is one of its options, with this default. */
  bodyLimit?: number | string;
}

/** The shared options resolved. */
export interface ResolvedSharedOptions {
  /** Where errors go: `onError` and `logger` (see `errorSink`). */
  onError: ErrorLogger;
}

/**
 * Checks the options every router shares, the same way for each (`scimRouter: bodyLimit must be…`),
 * then the keys: the options are an object; `storage` an object; `authenticate` a function (where
 * the router takes one); `baseUrl` an absolute http(s) URL; `onError` a function; `logger` an object
 * with `error`, `warn`, `info` and `debug` methods; `auditTrail` an object with `record`;
 * `bodyLimit` (where the router reads bodies) a positive size. Any key neither shared nor in
 * `ownKeys` is refused ("did you mean"). Every check throws `InvalidOptionError`
 * (`ERR_INVALID_OPTION`) naming the option, when the factory is called.
 */
export function checkRouterOptions<T extends object>(
  owner: string,
  options: T,
  ownKeys: OwnOptionKeys<T>,
  rules: SharedOptionRules & { bodyLimit: number | string },
): ResolvedSharedOptions & { bodyLimit: number | string };
export function checkRouterOptions<T extends object>(
  owner: string,
  options: T,
  ownKeys: OwnOptionKeys<T>,
  rules: SharedOptionRules,
): ResolvedSharedOptions;
export function checkRouterOptions<T extends object>(
  owner: string,
  options: T,
  ownKeys: OwnOptionKeys<T>,
  rules: SharedOptionRules,
): ResolvedSharedOptions & { bodyLimit?: number | string } {
  if (!options || typeof options !== 'object') optionError(owner, 'options', 'options are required');
  const shared = options as Partial<CommonRouterOptions> & BodyLimitOptions;
  const { authenticate: _authenticate, ...withoutAuthenticate } = COMMON_ROUTER_KEYS;
  const keys: OptionKeys<object> = {
    ...(rules.authenticate ? COMMON_ROUTER_KEYS : withoutAuthenticate),
    ...(rules.bodyLimit === undefined ? {} : { bodyLimit: true }),
    ...ownKeys,
  };
  storageOption(owner, shared.storage);
  checkOptionKeys(owner, options, keys);
  if (rules.authenticate) requireFunction(owner, 'authenticate', shared.authenticate, 'must be a function');
  baseUrlOption(owner, shared.baseUrl);
  loggingOptions(owner, shared);
  auditTrailOption(owner, shared.auditTrail);
  return {
    onError: errorSink(shared),
    ...(rules.bodyLimit === undefined
      ? {}
      : { bodyLimit: sizeOption(owner, 'bodyLimit', shared.bodyLimit, rules.bodyLimit) }),
  };
}

/**
 * Requires `storage`: an object with every method of the contract, not a promise of one (see
 * `requireStorage`).
 */
export function storageOption(owner: string, value: unknown): void {
  requireStorage(owner, { storage: value });
}

/** An optional `baseUrl`: an absolute `http:` or `https:` URL with a host (see `baseUrlProblem`). */
export function baseUrlOption(owner: string, value: unknown): void {
  if (value === undefined) return;
  const problem = baseUrlProblem(value);
  if (problem) {
    optionError(
      owner,
      'baseUrl',
      `baseUrl must be ${BASE_URL_FORM}, got ${JSON.stringify(value)}, which ${problem}`,
    );
  }
}

/** Optional `onError` (a function) and `logger` (pino's shape: `error`, `warn`, `info`, `debug`). */
export function loggingOptions(owner: string, options: { onError?: unknown; logger?: unknown }): void {
  optionalFunction(owner, 'onError', options.onError, undefined);
  const logger = options.logger;
  if (logger === undefined) return;
  const methods = logger as Record<string, unknown> | null;
  if (
    typeof logger !== 'object' ||
    methods === null ||
    !LOGGER_METHODS.every((m) => typeof methods[m] === 'function') ||
    (methods.child !== undefined && typeof methods.child !== 'function')
  ) {
    optionError(
      owner,
      'logger',
      'logger must be a pino-compatible logger (error, warn, info and debug methods; child optional)',
    );
  }
}

/** An optional `auditTrail`: what `createAuditTrail` answers (an object with `record`). */
export function auditTrailOption(owner: string, value: unknown): void {
  if (value === undefined) return;
  if (
    typeof value !== 'object' ||
    value === null ||
    !('record' in value) ||
    typeof value.record !== 'function'
  ) {
    optionError(owner, 'auditTrail', 'auditTrail must be an AuditTrail (createAuditTrail(...))');
  }
}
