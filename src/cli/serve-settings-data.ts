import type { ServeSetting } from './serve-setting.js';
import { boolean, countLimit, integer, oneOf, size } from './setting-readers.js';

const GIB = 1024 * 1024 * 1024;

/** The settings of the data plane: Bulk Data export, FHIR writes, search admission and bounds, patches (in `--help` order). */
export const DATA_SETTINGS = {
  bulkMaxKickoffsPerHour: {
    env: 'BULK_MAX_KICKOFFS_PER_HOUR',
    flag: '--bulk-max-kickoffs-per-hour <n>',
    defaultText: '1000',
    description:
      "export kick-offs a project may make in any 60 minutes, then `429` (`Infinity`: no limit); a runaway client's guard, high enough for a conformance kit's burst",
    read: countLimit(1000),
  },
  bulkMaxRunningExports: {
    env: 'BULK_MAX_RUNNING_EXPORTS',
    flag: '--bulk-max-running-exports <n>',
    defaultText: '2',
    description: 'exports of a project accepted or in progress at once, then `429`',
    read: integer(2, 1),
  },
  bulkExportThreads: {
    env: 'BULK_EXPORT_THREADS',
    flag: '--bulk-export-threads <n>',
    defaultText: '2',
    description: 'worker threads running exports, for all projects together (others wait their turn)',
    read: integer(2, 1),
  },
  bulkMaxProjectExportSize: {
    env: 'BULK_MAX_PROJECT_EXPORT_SIZE',
    flag: '--bulk-max-project-export-size <bytes>',
    defaultText: '1gb',
    description:
      'export files a project may keep (until they expire or are deleted), then `429` `too-costly`',
    read: size(GIB),
  },
  bulkMaxExportSize: {
    env: 'BULK_MAX_EXPORT_SIZE',
    flag: '--bulk-max-export-size <bytes>',
    defaultText: '4gb',
    description: 'files one export may write; beyond, it fails `too-costly` and its files are removed',
    read: size(4 * GIB),
  },
  bulkMaxTypeFilterMatches: {
    env: 'BULK_MAX_TYPE_FILTER_MATCHES',
    flag: '--bulk-max-type-filter-matches <n>',
    defaultText: '50000',
    description:
      'resources one chain or `_has` of a `_typeFilter` may match (resolved at kick-off), else `400` `too-costly` (`Infinity`: no limit)',
    read: countLimit(50_000),
  },
  importAllowPrivateAddresses: {
    env: 'IMPORT_ALLOW_PRIVATE_ADDRESSES',
    flag: '--import-allow-private-addresses',
    description:
      '`true`/`false`: `$import` pulls manifests, files and tokens from loopback, private and link-local addresses; unset: allowed unless `NODE_ENV=production` ([bulk import](docs/bulk-import.md#security))',
    read: (text, invalid) => (text === undefined ? undefined : boolean(text, invalid)),
  },
  importMaxRunning: {
    env: 'IMPORT_MAX_RUNNING',
    flag: '--import-max-running <n>',
    defaultText: '2',
    description: 'imports of a project accepted or in progress at once, then `429`',
    read: integer(2, 1),
  },
  importMaxInputs: {
    env: 'IMPORT_MAX_INPUTS',
    flag: '--import-max-inputs <n>',
    defaultText: '1000',
    description: '`input` files one `$import` kick-off may name, else `400`',
    read: integer(1000, 1),
  },
  importIdleTimeout: {
    env: 'IMPORT_IDLE_TIMEOUT',
    flag: '--import-idle-timeout <ms>',
    defaultText: '60000',
    description: 'milliseconds an import source may send nothing before its request fails (then retried)',
    read: integer(60_000, 1),
  },
  importManifestWait: {
    env: 'IMPORT_MANIFEST_WAIT',
    flag: '--import-manifest-wait <ms>',
    defaultText: '3600000',
    description:
      "milliseconds a source's manifest may answer `202` (its export still running) before the import fails",
    read: integer(3_600_000, 1),
  },
  importMaxErrorsPerFile: {
    env: 'IMPORT_MAX_ERRORS_PER_FILE',
    flag: '--import-max-errors-per-file <n>',
    defaultText: '10000',
    description: "refused lines listed in an input file's error file (the count stays exact)",
    read: integer(10_000, 1),
  },
  bulkMinFreeSpace: {
    env: 'BULK_MIN_FREE_SPACE',
    flag: '--bulk-min-free-space <bytes>',
    defaultText: '1gb',
    description:
      'free space the export directory needs for a kick-off, else `503` (`0`: not checked; files in PostgreSQL are not)',
    read: size(GIB, { zero: true, infinite: false }),
  },
  bulkRequireAsyncHeaders: {
    env: 'BULK_REQUIRE_ASYNC_HEADERS',
    flag: '--bulk-require-async-headers',
    defaultText: 'false',
    description: '`true`: bulk export kick-offs without `Accept` or `Prefer: respond-async` answer `400`',
    read: boolean,
  },
  fhirDefaultReturn: {
    env: 'FHIR_DEFAULT_RETURN',
    flag: '--fhir-default-return <return>',
    defaultText: 'representation',
    description:
      '`minimal`: FHIR writes and Bundle write entries answer without the resource unless `Prefer: return=representation`',
    read: (text, invalid) => oneOf(['representation', 'minimal'] as const)(text, invalid) ?? 'representation',
  },
  searchMaxConcurrent: {
    env: 'SEARCH_MAX_CONCURRENT',
    flag: '--search-max-concurrent <n>',
    defaultText: '4',
    description:
      'costly reads of one project (searches, `$everything`, history listings) running at once; each project has its own ([deployment](docs/deployment.md#tenant-fairness))',
    read: integer(4, 1),
  },
  searchMaxQueued: {
    env: 'SEARCH_MAX_QUEUED',
    flag: '--search-max-queued <n>',
    defaultText: '32',
    description: "a project's costly reads that may wait for a turn; more answer `429` at once",
    read: integer(32, 0),
  },
  searchMaxWaitMs: {
    env: 'SEARCH_MAX_WAIT_MS',
    flag: '--search-max-wait-ms <ms>',
    defaultText: '10000',
    description: 'longest wait of a costly read for its turn, then `429` with `Retry-After`',
    read: integer(10_000, 0),
  },
  searchTimeoutMs: {
    env: 'SEARCH_TIMEOUT_MS',
    flag: '--search-timeout-ms <ms>',
    defaultText: '10000',
    description:
      'time a costly read may run from the start of its turn; then it is stopped and answers `400` `too-costly` (keep it under `DATABASE_STATEMENT_TIMEOUT_MS`)',
    read: integer(10_000, 1),
  },
  searchMaxSortKeys: {
    env: 'SEARCH_MAX_SORT_KEYS',
    flag: '--search-max-sort-keys <n>',
    defaultText: '5',
    description: '`_sort` keys a search may give, else `400` `too-costly`',
    read: integer(5, 1),
  },
  searchMaxParameters: {
    env: 'SEARCH_MAX_PARAMETERS',
    flag: '--search-max-parameters <n>',
    defaultText: '30',
    description:
      'search parameters one search may give (a repeated one counting each time), else `400` `too-costly`',
    read: integer(30, 1),
  },
  searchMaxHasDepth: {
    env: 'SEARCH_MAX_HAS_DEPTH',
    flag: '--search-max-has-depth <n>',
    defaultText: '2',
    description: '`_has` nested in one another, else `400` `too-costly`',
    read: integer(2, 1),
  },
  searchMaxOffset: {
    env: 'SEARCH_MAX_OFFSET',
    flag: '--search-max-offset <n>',
    defaultText: '10000',
    description: "largest `_offset`, else `400` `too-costly` (the Bundle's `next` links page further)",
    read: integer(10_000, 0),
  },
  searchMaxAccurateTotal: {
    env: 'SEARCH_MAX_ACCURATE_TOTAL',
    flag: '--search-max-accurate-total <n>',
    defaultText: '100000',
    description:
      'matches an exact search total may count (`_total=accurate`, `_summary=count`), else `400` `too-costly`; a search without `_total` counts none (`Infinity`: no limit)',
    read: countLimit(100_000),
  },
  searchMaxTerminologyCodes: {
    env: 'SEARCH_MAX_TERMINOLOGY_CODES',
    flag: '--search-max-terminology-codes <n>',
    defaultText: '10000',
    description:
      'codes a token `:in`, `:not-in`, `:below` or `:above` may stand for (the value set, or the code and its descendants or ancestors), else `400` `too-costly`',
    read: integer(10_000, 1),
  },
  terminologyMaxExpansion: {
    env: 'TERMINOLOGY_MAX_EXPANSION',
    flag: '--terminology-max-expansion <n>',
    defaultText: '10000',
    description:
      'codes a `ValueSet/$expand` without `count` may answer, else `400` `too-costly` (a page of a larger expansion is answered)',
    read: integer(10_000, 1),
  },
  fhirMaxPatchOperations: {
    env: 'FHIR_MAX_PATCH_OPERATIONS',
    flag: '--fhir-max-patch-operations <n>',
    defaultText: '1000',
    description:
      'operations one PATCH (JSON Patch or FHIRPath Patch, a Bundle entry too) may hold, else `413` `too-costly` before any is applied',
    read: integer(1000, 1),
  },
  fhirMaxPatchedResourceSize: {
    env: 'FHIR_MAX_PATCHED_RESOURCE_SIZE',
    flag: '--fhir-max-patched-resource-size <bytes>',
    defaultText: '32mb',
    description:
      'largest resource a PATCH may leave (its JSON, measured as each operation adds to it), else `413` `too-costly` naming the operation ([docs/reliability.md](docs/reliability.md#input-limits))',
    read: size(32 * 1024 * 1024, { infinite: false }),
  },
} satisfies Record<string, ServeSetting<unknown>>;
