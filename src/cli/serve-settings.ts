import path from 'node:path';
import { BASE_URL_FORM, baseUrlProblem } from '../common/base-url.js';
import type { ProfileType } from '../index.js';
import { UsageError } from './cli-error.js';
import { CONNECTION_STRING_FORMS, connectionStringProblem, withoutPassword } from './database-url.js';
import {
  boolean,
  countLimit,
  historyRetention,
  integer,
  oneOf,
  optionalText,
  size,
} from './setting-readers.js';

/**
 * Refuses a setting's text: the error says what the value must be (`expected`) and, when given,
 * what is wrong with this one (`which`: `has the scheme "ftp:"`).
 */
export type Invalid = (expected: string, which?: string) => never;

/**
 * One setting of `serve`: its flag and environment variable, its default, its description and how
 * its text is read. `SERVE_SETTINGS` below is the only place a setting is written: the commander
 * options (program.ts), the flags laid over the environment (serve.ts), `readConfig`
 * (serve-config.ts) and the tables of the README and docs/getting-started.md
 * (`npm run docs:serve`) are all derived from it.
 */
export interface ServeSetting<T> {
  /** The environment variable (`PORT`). */
  env: string;
  /**
   * The flag, with its value's placeholder (`--port <port>`); without one it is a switch that
   * stands for `true`. Its commander attribute (`--data-dir`: `dataDir`) is the setting's key.
   */
  flag: string;
  /** The default as `--help` and the docs show it (`8103`); absent: unset. */
  defaultText?: string;
  /** What it does, one sentence (Markdown: the docs keep it, `--help` drops backticks and links). */
  description: string;
  /** `file` or `postgres`: given with the other store, `serve` refuses it rather than ignore it. */
  store?: 'file' | 'postgres';
  /**
   * The value, from the variable's text: trimmed, `undefined` when unset or empty (the default
   * then). Calls `invalid(expected, which)` on a bad text, which throws a `UsageError` naming the
   * variable, the flag and the text.
   */
  read(text: string | undefined, invalid: Invalid): T;
  /** The text as a refusal quotes it, when it may hold a secret (a connection string's password). */
  quote?(text: string): string;
}

const GIB = 1024 * 1024 * 1024;
/** Where `serve` mounts the FHIR API under `BASE_URL` (fhirPlatform's default `paths.fhir`). */
export const FHIR_PATH = '/fhir/R4';
const PROFILE_TYPES: readonly ProfileType[] = ['Patient', 'Practitioner', 'RelatedPerson'];
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * `BASE_URL`: an origin, with a reverse proxy's path prefix if any. One that ends with the FHIR
 * path is almost surely the FHIR base given by mistake: the server would advertise
 * `…/fhir/R4/fhir/R4`, which answers 404.
 */
function readBaseUrl(text: string | undefined, invalid: Invalid): string | undefined {
  if (text === undefined) return undefined;
  const problem = baseUrlProblem(text);
  if (problem) invalid(BASE_URL_FORM, problem);
  const baseUrl = text.replace(/\/+$/, '');
  if (baseUrl.endsWith(FHIR_PATH)) {
    const origin = baseUrl.slice(0, -FHIR_PATH.length);
    invalid(
      "the server's origin, with a reverse proxy's path prefix if any, not the FHIR base",
      `ends with ${FHIR_PATH}, the path the server adds: its FHIR base would be ${baseUrl}${FHIR_PATH}. Set BASE_URL=${origin} for the FHIR base ${baseUrl}`,
    );
  }
  return baseUrl;
}

/**
 * Every setting of `serve`, in the order of `--help` and the docs. Defaults of library options
 * are the library's own (test/cli/serve-settings.test.ts compares them).
 */
export const SERVE_SETTINGS = {
  port: {
    env: 'PORT',
    flag: '--port <port>',
    defaultText: '8103',
    description: 'listening port (`0`: any free port)',
    read: integer(8103, 0, 65535),
  },
  host: {
    env: 'HOST',
    flag: '--host <address>',
    defaultText: '0.0.0.0',
    description: 'listening address',
    read: (text) => text ?? '0.0.0.0',
  },
  baseUrl: {
    env: 'BASE_URL',
    flag: '--base-url <url>',
    defaultText: 'http://localhost:$PORT',
    description:
      "public origin used in absolute URLs and token audiences: an absolute `http://` or `https://` URL, with a reverse proxy's path prefix if any; not the FHIR base (the server adds `/fhir/R4`)",
    read: readBaseUrl,
  },
  dataDir: {
    env: 'DATA_DIR',
    flag: '--data-dir <dir>',
    defaultText: './data',
    description:
      'the file store (`store/`), export files (`exports/`) and audit journal; created when missing; each instance needs its own, even instances sharing `DATABASE_URL`',
    read: (text) => path.resolve(text ?? './data'),
  },
  superAdminClientId: {
    env: 'SUPER_ADMIN_CLIENT_ID',
    flag: '--super-admin-client-id <id>',
    defaultText: 'super-admin',
    description:
      'the super-admin client; with `SUPER_ADMIN_CLIENT_SECRET`, created or updated with that secret at each start',
    read: optionalText,
  },
  superAdminClientSecret: {
    env: 'SUPER_ADMIN_CLIENT_SECRET',
    flag: '--super-admin-client-secret <secret>',
    description:
      'its secret (give both or neither); unset, the first start generates one and prints it once on stderr (`rotate-super-admin-secret` replaces it)',
    read: optionalText,
  },
  databaseUrl: {
    env: 'DATABASE_URL',
    flag: '--database-url <url>',
    description:
      'a PostgreSQL connection string (`postgres://user:password@host:5432/database`, `postgresql://…` or `socket:/path?db=database`): store everything there instead of the file store (several instances can share it)',
    read: (text, invalid) => {
      if (text === undefined) return undefined;
      const problem = connectionStringProblem(text);
      return problem ? invalid(CONNECTION_STRING_FORMS, problem) : text;
    },
    quote: withoutPassword,
  },
  databaseMaxConnections: {
    env: 'DATABASE_MAX_CONNECTIONS',
    flag: '--database-max-connections <n>',
    defaultText: '10',
    description: "connections of the store's pool (at least 2)",
    store: 'postgres',
    read: integer(10, 2),
  },
  databaseSearchConnections: {
    env: 'DATABASE_SEARCH_CONNECTIONS',
    flag: '--database-search-connections <n>',
    defaultText: '7 (the pool less 30%, at least 2)',
    description:
      'connections of the pool searches and history listings may hold at once, all projects together; the others stay free for reads, writes, tokens and `/readyz` (less than `DATABASE_MAX_CONNECTIONS`; [docs/deployment.md](docs/deployment.md#database-settings-and-pool-sizes))',
    store: 'postgres',
    read: (text, invalid) => (text === undefined ? undefined : integer(1, 1)(text, invalid)),
  },
  databaseMaxProjectSearchConnections: {
    env: 'DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS',
    flag: '--database-max-project-search-connections <n>',
    defaultText: '3 (half of `DATABASE_SEARCH_CONNECTIONS`)',
    description:
      "how many of those one project's searches may hold at once; its others wait in turn (at most `DATABASE_SEARCH_CONNECTIONS`)",
    store: 'postgres',
    read: (text, invalid) => (text === undefined ? undefined : integer(1, 1)(text, invalid)),
  },
  databaseAcquireTimeoutMs: {
    env: 'DATABASE_ACQUIRE_TIMEOUT_MS',
    flag: '--database-acquire-timeout-ms <ms>',
    defaultText: '10000',
    description:
      'longest wait for a free connection, and for a search without a deadline for room among the search connections; then `503` with `Retry-After` (`0`: no limit)',
    store: 'postgres',
    read: integer(10_000, 0),
  },
  databaseLockTimeoutMs: {
    env: 'DATABASE_LOCK_TIMEOUT_MS',
    flag: '--database-lock-timeout-ms <ms>',
    defaultText: '15000',
    description: "PostgreSQL's `lock_timeout` on the store's connections (`0`: no limit)",
    store: 'postgres',
    read: integer(15_000, 0),
  },
  databaseStatementTimeoutMs: {
    env: 'DATABASE_STATEMENT_TIMEOUT_MS',
    flag: '--database-statement-timeout-ms <ms>',
    defaultText: '60000',
    description: "PostgreSQL's `statement_timeout` (exports' `COPY` and cursors are exempt; `0`: no limit)",
    store: 'postgres',
    read: integer(60_000, 0),
  },
  databaseIdleInTransactionTimeoutMs: {
    env: 'DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS',
    flag: '--database-idle-in-transaction-timeout-ms <ms>',
    defaultText: '60000',
    description: "PostgreSQL's `idle_in_transaction_session_timeout` (`0`: no limit)",
    store: 'postgres',
    read: integer(60_000, 0),
  },
  databaseCloseTimeoutMs: {
    env: 'DATABASE_CLOSE_TIMEOUT_MS',
    flag: '--database-close-timeout-ms <ms>',
    defaultText: '10000',
    description: 'how long closing the store waits for calls in flight before it ends their connections',
    store: 'postgres',
    read: integer(10_000, 0),
  },
  databaseReadReplicas: {
    env: 'DATABASE_READ_REPLICAS',
    flag: '--database-read-replicas <urls>',
    description:
      'connection strings of streaming replicas, comma-separated: reads run there once they have replayed the writes they must see ([docs/deployment.md](docs/deployment.md#read-replicas))',
    store: 'postgres',
    read: (text, invalid) => {
      if (text === undefined) return undefined;
      const urls = text.split(',').map((url) => url.trim());
      const expected = `a comma-separated list of connection strings, each ${CONNECTION_STRING_FORMS}`;
      if (urls.some((url) => url === '')) invalid(expected, 'has an empty entry');
      for (const url of urls) {
        const problem = connectionStringProblem(url);
        if (problem) invalid(expected, `has an entry that ${problem}: "${withoutPassword(url)}"`);
      }
      return urls;
    },
    quote: (text) => text.split(',').map(withoutPassword).join(','),
  },
  databaseReplicaFreshness: {
    env: 'DATABASE_REPLICA_FRESHNESS',
    flag: '--database-replica-freshness <which>',
    defaultText: 'instance',
    description:
      "what a replica must have replayed to serve a read: this instance's writes (`instance`), or every commit the primary had made (`primary`: clients read their writes through any instance)",
    store: 'postgres',
    read: (text, invalid) => oneOf(['instance', 'primary'] as const)(text, invalid) ?? 'instance',
  },
  backupDir: {
    env: 'BACKUP_DIR',
    flag: '--backup-dir <dir>',
    description:
      'each `kill -USR2 <pid>` writes a backup of the running file store into a new directory here ([docs/file-store.md](docs/file-store.md#backups))',
    store: 'file',
    read: (text) => (text === undefined ? undefined : path.resolve(text)),
  },
  history: {
    env: 'HISTORY',
    flag: '--history <retention>',
    defaultText: 'all',
    description:
      'old versions the store keeps for `vread` and `_history`: `all`, `versions:<n>` (the last n of each resource) or `days:<n>` (those superseded less than n days ago) ([docs/storage.md](docs/storage.md#versions-and-history))',
    read: historyRetention,
  },
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
  scimDefaultUserType: {
    env: 'SCIM_DEFAULT_USER_TYPE',
    flag: '--scim-default-user-type <type>',
    description:
      'SCIM profile type of users created without `userType`: `Patient`, `Practitioner` or `RelatedPerson`',
    read: oneOf(PROFILE_TYPES),
  },
  scimEchoUserName: {
    env: 'SCIM_ECHO_USER_NAME',
    flag: '--scim-echo-user-name',
    defaultText: 'false',
    description:
      '`true`: SCIM answers carry the `userName` the identity provider sent ([docs/scim.md](docs/scim.md))',
    read: boolean,
  },
  idpIssuer: {
    env: 'IDP_ISSUER',
    flag: '--idp-issuer <url>',
    description:
      'the OpenID Connect identity provider users sign in with, for projects that set none of their own: its issuer (`https://`, or `http://` on localhost) ([docs/login.md](docs/login.md)); register `<BASE_URL>/oauth2/federation/callback` there',
    read: (text, invalid) => {
      if (text === undefined) return undefined;
      const url = URL.canParse(text)
        ? new URL(text)
        : invalid('an absolute https URL (http only on localhost)');
      const local = ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname);
      if (url.protocol !== 'https:' && !(url.protocol === 'http:' && local))
        invalid('an absolute https URL (http only on localhost)');
      return text.replace(/\/+$/, '');
    },
  },
  idpClientId: {
    env: 'IDP_CLIENT_ID',
    flag: '--idp-client-id <id>',
    description: "the platform's client id at that provider (with `IDP_ISSUER`)",
    read: optionalText,
  },
  idpClientSecret: {
    env: 'IDP_CLIENT_SECRET',
    flag: '--idp-client-secret <secret>',
    description: 'its client secret (`client_secret_basic`)',
    read: optionalText,
  },
  idpPrivateKeyFile: {
    env: 'IDP_PRIVATE_KEY_FILE',
    flag: '--idp-private-key-file <file>',
    description: 'or a file holding its private JWK (JSON), to authenticate with `private_key_jwt`',
    read: (text) => (text === undefined ? undefined : path.resolve(text)),
  },
  idpScope: {
    env: 'IDP_SCOPE',
    flag: '--idp-scope <scopes>',
    defaultText: 'openid email profile',
    description: 'scopes asked of the provider (with `openid`)',
    read: (text, invalid) => {
      const scope = (text ?? 'openid email profile').split(/\s+/).join(' ');
      if (!scope.split(' ').includes('openid')) invalid('scopes including openid');
      return scope;
    },
  },
  idpClaim: {
    env: 'IDP_CLAIM',
    flag: '--idp-claim <claim>',
    defaultText: 'email',
    description: "the provider's claim that names the user (`email`, `preferred_username`, `sub`, …)",
    read: (text) => text ?? 'email',
  },
  idpMatch: {
    env: 'IDP_MATCH',
    flag: '--idp-match <attribute>',
    defaultText: 'email',
    description: 'the SCIM user attribute the claim must equal: `email`, `userName` or `externalId`',
    read: (text, invalid) => oneOf(['email', 'userName', 'externalId'] as const)(text, invalid) ?? 'email',
  },
  idpJwksTimeoutMs: {
    env: 'IDP_JWKS_TIMEOUT_MS',
    flag: '--idp-jwks-timeout-ms <ms>',
    defaultText: '5000',
    description:
      "how long an identity provider's `jwks_uri` (the keys that verify its ID tokens' signatures) has to answer; a slower one fails the sign-in ([login](docs/login.md#the-providers-keys))",
    read: integer(5000, 1),
  },
  idpJwksMaxBytes: {
    env: 'IDP_JWKS_MAX_BYTES',
    flag: '--idp-jwks-max-bytes <bytes>',
    defaultText: '65536',
    description: "most bytes read from an identity provider's `jwks_uri`; a larger key set fails the sign-in",
    read: size(65536, { infinite: false }),
  },
  idpJwksCacheMaxAgeMs: {
    env: 'IDP_JWKS_CACHE_MAX_AGE_MS',
    flag: '--idp-jwks-cache-max-age-ms <ms>',
    defaultText: '600000',
    description: "how long an identity provider's fetched keys are reused before they are fetched again",
    read: integer(600_000, 0),
  },
  idpJwksCooldownMs: {
    env: 'IDP_JWKS_COOLDOWN_MS',
    flag: '--idp-jwks-cooldown-ms <ms>',
    defaultText: '30000',
    description:
      "after a fetch of an identity provider's keys, how long an ID token with a `kid` they lack is refused rather than cause another fetch (a rotated key)",
    read: integer(30_000, 0),
  },
  allowPrivateIdpJwksAddresses: {
    env: 'ALLOW_PRIVATE_IDP_JWKS_ADDRESSES',
    flag: '--allow-private-idp-jwks-addresses',
    description:
      "`true`/`false`: fetch identity providers' `jwks_uri`s on loopback, private and link-local addresses (a provider inside your network); unset: allowed unless `NODE_ENV=production`",
    read: (text, invalid) => (text === undefined ? undefined : boolean(text, invalid)),
  },
  allowPrivateJwksAddresses: {
    env: 'ALLOW_PRIVATE_JWKS_ADDRESSES',
    flag: '--allow-private-jwks-addresses',
    description:
      '`true`/`false`: register and fetch client `jwksUri`s on loopback, private and link-local addresses; unset: allowed unless `NODE_ENV=production` ([auth](docs/auth.md#client-keys-from-a-jwks_uri))',
    read: (text, invalid) => (text === undefined ? undefined : boolean(text, invalid)),
  },
  refreshTokenLifetime: {
    env: 'REFRESH_TOKEN_LIFETIME',
    flag: '--refresh-token-lifetime <seconds>',
    defaultText: '2592000',
    description:
      'seconds a refresh token granted with `offline_access` lasts (30 days; each refresh issues a new one) ([auth](docs/auth.md#token-request-authorization_code))',
    read: integer(30 * 24 * 3600, 1),
  },
  onlineRefreshTokenLifetime: {
    env: 'ONLINE_REFRESH_TOKEN_LIFETIME',
    flag: '--online-refresh-token-lifetime <seconds>',
    defaultText: '43200',
    description: 'seconds a refresh token granted with `online_access` lasts (12 hours)',
    read: integer(12 * 3600, 1),
  },
  authorizeTicketLifetime: {
    env: 'AUTHORIZE_TICKET_LIFETIME',
    flag: '--authorize-ticket-lifetime <seconds>',
    defaultText: '600',
    description:
      'seconds a pending SMART authorization (sign-in, patient choice, consent) may take before the user starts again',
    read: integer(600, 1),
  },
  maxConnectionsPerAddress: {
    env: 'MAX_CONNECTIONS_PER_ADDRESS',
    flag: '--max-connections-per-address <n>',
    defaultText: '128',
    description:
      'open connections per client address (slow clients); `Infinity` behind a proxy, whose address every connection has',
    read: countLimit(128),
  },
  shutdownTimeoutMs: {
    env: 'SHUTDOWN_TIMEOUT_MS',
    flag: '--shutdown-timeout-ms <ms>',
    defaultText: '10000',
    description:
      'on SIGTERM or SIGINT, how long requests still running may finish before their connections are cut',
    read: integer(10_000, 0),
  },
  auditMaxUrlLength: {
    env: 'AUDIT_MAX_URL_LENGTH',
    flag: '--audit-max-url-length <chars>',
    defaultText: '1024',
    description:
      'longest request text (path and query, claimed client id and scope) the audit event of a refusal keeps; longer ones are cut',
    read: integer(1024, 1, 65_536),
  },
  auditRefusalWindowMs: {
    env: 'AUDIT_REFUSAL_WINDOW_MS',
    flag: '--audit-refusal-window-ms <ms>',
    defaultText: '60000',
    description:
      'refusals from one source are recorded as the first one and a count per window of this length (`0`: one event each)',
    read: integer(60_000, 0, 3_600_000),
  },
  auditMaxRefusalSources: {
    env: 'AUDIT_MAX_REFUSAL_SOURCES',
    flag: '--audit-max-refusal-sources <n>',
    defaultText: '1000',
    description: 'sources whose refusals are counted apart in a window; further ones are counted together',
    read: integer(1000, 1, 1_000_000),
  },
  logLevel: {
    env: 'LOG_LEVEL',
    flag: '--log-level <level>',
    defaultText: 'info',
    description: `the log's level: ${LOG_LEVELS.map((l) => `\`${l}\``).join(', ')}`,
    read: (text, invalid): LogLevel => oneOf(LOG_LEVELS)(text, invalid) ?? 'info',
  },
} satisfies Record<string, ServeSetting<unknown>>;

export type ServeSettingKey = keyof typeof SERVE_SETTINGS;

/** The value of every setting, as read (`readConfig` adds the rules that join settings). */
export type ServeValues = {
  [K in ServeSettingKey]: ReturnType<(typeof SERVE_SETTINGS)[K]['read']>;
};

/** `serve`'s flags as commander parses them: text, or `true` for a switch. */
export type ServeFlags = { [K in ServeSettingKey]?: string | boolean };

/** The settings with their keys, in order. */
export function serveSettings(): [ServeSettingKey, ServeSetting<unknown>][] {
  return Object.entries(SERVE_SETTINGS) as [ServeSettingKey, ServeSetting<unknown>][];
}

/** The text of one variable as `read` takes it: trimmed, `undefined` when unset or blank. */
export function settingText(env: NodeJS.ProcessEnv, setting: ServeSetting<unknown>): string | undefined {
  return env[setting.env]?.trim() || undefined;
}

/** Reads every setting from `env`, each through its own `read`. */
export function readSettings(env: NodeJS.ProcessEnv): ServeValues {
  const values: Record<string, unknown> = {};
  for (const [key, setting] of serveSettings()) {
    const text = settingText(env, setting);
    const flag = setting.flag.split(' ')[0];
    values[key] = setting.read(text, (expected, which) => {
      const given = env[setting.env] ?? '';
      const quoted = setting.quote ? setting.quote(given) : given;
      throw new UsageError(
        `${setting.env} (${flag}) must be ${expected}, got "${quoted}"${which ? `, which ${which}` : ''}`,
      );
    });
  }
  return values as ServeValues;
}

/** The environment with the flags laid over it, so that flags and variables are read alike. */
export function serveEnvironment(flags: ServeFlags, env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const merged: NodeJS.ProcessEnv = { ...env };
  for (const [key, setting] of serveSettings()) {
    const value = flags[key];
    if (value !== undefined) merged[setting.env] = String(value);
  }
  return merged;
}

/** A description as `--help` prints it: Markdown links reduced to their text, no backticks. */
export function plainDescription(setting: ServeSetting<unknown>): string {
  const text = setting.description.replace(/\[([^\]]+)\]\([^)]*\)/g, '$1').replaceAll('`', '');
  const store =
    setting.store === 'file' ? 'file store only: ' : setting.store === 'postgres' ? 'PostgreSQL only: ' : '';
  const fallback = setting.defaultText === undefined ? '' : `; default ${setting.defaultText}`;
  return `${store}${text} (${setting.env}${fallback})`;
}
