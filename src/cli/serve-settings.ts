import path from 'node:path';
import { BASE_URL_FORM, baseUrlProblem } from '../common/base-url.js';
import { UsageError } from './cli-error.js';
import type { Invalid, ServeSetting } from './serve-setting.js';
import { DATA_SETTINGS } from './serve-settings-data.js';
import { IDENTITY_SETTINGS } from './serve-settings-identity.js';
import { STORE_SETTINGS } from './serve-settings-store.js';
import { countLimit, integer, oneOf, optionalText } from './setting-readers.js';

export type { Invalid, ServeSetting } from './serve-setting.js';

/** Where `serve` mounts the FHIR API under `BASE_URL` (fhirPlatform's default `paths.fhir`). */
export const FHIR_PATH = '/fhir/R4';
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
 * Every setting of `serve`, in the order of `--help` and the docs: the server's own here, the
 * store's, the data plane's and identity's from their modules. Defaults of library options are
 * the library's own (test/cli/serve-settings.test.ts compares them).
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
  ...STORE_SETTINGS,
  ...DATA_SETTINGS,
  ...IDENTITY_SETTINGS,
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
