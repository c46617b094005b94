/**
 * The `import` option of `bulkExportRouter`: `$import` (ping-and-pull) and its limits. See
 * docs/bulk-import.md.
 */
import { privateAddressesAllowedByDefault } from '../../auth/keys/public-address.js';
import { booleanOption, optionError, positiveInteger, positiveNumber } from '../../common/options.js';
import type { ResourceValidator } from '../../fhir/validation/structure-validator.js';
import type { Terminology } from '../../terminology/terminology-types.js';

/** Options of `$import` (`bulkExportRouter({ import })`). */
export interface BulkImportOptions {
  /**
   * Pull from loopback, private and link-local addresses too (manifests, files, token endpoints).
   * @default true outside production (`NODE_ENV` other than `production`), false in production
   */
  allowPrivateAddresses?: boolean;
  /** Milliseconds a source may send nothing (connecting, headers or body) before the request fails. @default 60000 */
  idleTimeout?: number;
  /** Most bytes of a manifest or token answer. @default 16777216 (16 MiB) */
  maxManifestBytes?: number;
  /** Milliseconds a manifest URL may answer 202 (its export still running) before the import fails. @default 3600000 */
  manifestWait?: number;
  /** Tries of a request failing transiently (network, 429, 5xx), with backoff, before a file is given up. @default 5 */
  attempts?: number;
  /** Most `input` files of one kick-off. @default 1000 */
  maxInputs?: number;
  /** Imports running or waiting per project; one more kick-off answers 429. @default 2 */
  maxRunning?: number;
  /** Lines written per store call. @default 2000 */
  batchSize?: number;
  /** Longest line accepted, in characters (a longer one is refused and reported). @default 16777216 */
  maxLineLength?: number;
  /** Refused lines listed per input file in its error file (the count stays exact). @default 10000 */
  maxErrorsPerFile?: number;
  /** The structure validator of strict projects. @default the FHIR router's R4 validator */
  validator?: ResourceValidator;
  /** The terminology of binding checks in strict projects. @default `r4Terminology()` */
  terminology?: Terminology;
}

/** The import options with defaults filled in (validator and terminology stay optional). */
export type ResolvedBulkImportOptions = Required<Omit<BulkImportOptions, 'validator' | 'terminology'>> &
  Pick<BulkImportOptions, 'validator' | 'terminology'>;

const OWNER = 'bulkExportRouter';

/** Fills in defaults; `false` disables `$import`. */
export function resolveBulkImportOptions(
  value: BulkImportOptions | false | undefined,
): ResolvedBulkImportOptions | false {
  if (value === false) return false;
  if (value !== undefined && (typeof value !== 'object' || value === null))
    optionError(OWNER, 'import', 'import must be an options object or false');
  const o = value ?? {};
  const n = (name: keyof BulkImportOptions, fallback: number) =>
    positiveInteger(OWNER, `import.${name}`, o[name] as number | undefined, fallback);
  return {
    allowPrivateAddresses: booleanOption(
      OWNER,
      'import.allowPrivateAddresses',
      o.allowPrivateAddresses,
      privateAddressesAllowedByDefault(),
    ),
    idleTimeout: positiveNumber(OWNER, 'import.idleTimeout', o.idleTimeout, 60_000),
    maxManifestBytes: n('maxManifestBytes', 16 * 1024 * 1024),
    manifestWait: positiveNumber(OWNER, 'import.manifestWait', o.manifestWait, 3_600_000),
    attempts: n('attempts', 5),
    maxInputs: n('maxInputs', 1000),
    maxRunning: n('maxRunning', 2),
    batchSize: n('batchSize', 2000),
    maxLineLength: n('maxLineLength', 16 * 1024 * 1024),
    maxErrorsPerFile: n('maxErrorsPerFile', 10_000),
    ...(o.validator ? { validator: o.validator } : {}),
    ...(o.terminology ? { terminology: o.terminology } : {}),
  };
}
