import { pino, type Logger } from 'pino';
import { readConfig } from './serve-config.js';
import { backupOnSignal } from './backup-signal.js';
import { startStandalone } from './standalone.js';
import { UsageError } from './cli-error.js';

/** `serve` flags; each one wins over the environment variable of the same setting. */
export interface ServeFlags {
  port?: string;
  host?: string;
  baseUrl?: string;
  dataDir?: string;
  databaseUrl?: string;
  superAdminClientId?: string;
  superAdminClientSecret?: string;
  scimDefaultUserType?: string;
  scimEchoUserName?: boolean;
  bulkRequireAsyncHeaders?: boolean;
  fhirDefaultReturn?: string;
  maxConnectionsPerAddress?: string;
  backupDir?: string;
  allowPrivateJwksAddresses?: boolean;
  logLevel?: string;
}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** The environment with the flags laid over it, so `readConfig` checks flags and variables alike. */
export function serveEnvironment(flags: ServeFlags, env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const set = (value: string | boolean | undefined): string | undefined =>
    value === undefined ? undefined : String(value);
  const overrides: Record<string, string | undefined> = {
    PORT: set(flags.port),
    HOST: set(flags.host),
    BASE_URL: set(flags.baseUrl),
    DATA_DIR: set(flags.dataDir),
    DATABASE_URL: set(flags.databaseUrl),
    SUPER_ADMIN_CLIENT_ID: set(flags.superAdminClientId),
    SUPER_ADMIN_CLIENT_SECRET: set(flags.superAdminClientSecret),
    SCIM_DEFAULT_USER_TYPE: set(flags.scimDefaultUserType),
    SCIM_ECHO_USER_NAME: set(flags.scimEchoUserName),
    BULK_REQUIRE_ASYNC_HEADERS: set(flags.bulkRequireAsyncHeaders),
    FHIR_DEFAULT_RETURN: set(flags.fhirDefaultReturn),
    MAX_CONNECTIONS_PER_ADDRESS: set(flags.maxConnectionsPerAddress),
    BACKUP_DIR: set(flags.backupDir),
    ALLOW_PRIVATE_JWKS_ADDRESSES: set(flags.allowPrivateJwksAddresses),
  };
  const merged: NodeJS.ProcessEnv = { ...env };
  for (const [name, value] of Object.entries(overrides)) if (value !== undefined) merged[name] = value;
  return merged;
}

function createLogger(level: string): Logger {
  if (!LOG_LEVELS.includes(level)) {
    throw new UsageError(`LOG_LEVEL (--log-level) must be one of ${LOG_LEVELS.join(', ')}, got "${level}"`);
  }
  return pino({ name: 'fhir-platform-kit', level });
}

/**
 * `fhir-platform-kit serve`: runs the standalone server until SIGTERM or SIGINT, logging JSON lines
 * (pino) on stdout. With `BACKUP_DIR`, each SIGUSR2 backs the file store up there. A super-admin
 * secret generated on the first start is written once to stderr as plain text, never into the log.
 * Resolves when the server has stopped.
 */
export async function serve(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const config = readConfig(serveEnvironment(flags, env));
  const logger = createLogger(flags.logLevel ?? (env.LOG_LEVEL || 'info'));
  logger.info(
    { dataDir: config.dataDir, storage: config.databaseUrl ? 'postgres' : 'file' },
    'starting the standalone server',
  );
  const standalone = await startStandalone(config, { logger, logRequests: true });
  const base = standalone.baseUrl;
  const address = standalone.server.address();
  logger.info(
    {
      address: typeof address === 'object' && address ? `${address.address}:${address.port}` : address,
      fhir: `${base}/fhir/R4`,
      scim: `${base}/scim/v2`,
      tokenEndpoint: `${base}/oauth2/token`,
    },
    'listening',
  );
  if (standalone.generatedSuperAdmin) {
    const { clientId, clientSecret } = standalone.generatedSuperAdmin;
    logger.info({ clientId }, 'super-admin client created; its secret is shown once on stderr');
    process.stderr.write(
      'Super-admin client created (the secret is shown only this once; it is stored hashed):\n' +
        `  SUPER_ADMIN_CLIENT_ID=${clientId}\n  SUPER_ADMIN_CLIENT_SECRET=${clientSecret}\n`,
    );
  }

  const backups = config.backupDir ? backupOnSignal(standalone.storage, config.backupDir, logger) : undefined;
  const signal = await new Promise<NodeJS.Signals>((resolve) => {
    process.once('SIGTERM', () => resolve('SIGTERM'));
    process.once('SIGINT', () => resolve('SIGINT'));
  });
  logger.info({ signal }, 'shutting down');
  // A second signal stops the process at once, whatever is still running.
  const force = (again: NodeJS.Signals) => {
    logger.warn({ signal: again }, 'second signal: exiting without waiting');
    process.exit(1);
  };
  process.once('SIGTERM', force);
  process.once('SIGINT', force);
  try {
    // A backup under way finishes first (it reads the store's open files).
    await backups?.stop();
    await standalone.close();
  } catch (error) {
    logger.error({ err: error }, 'shutdown failed');
    throw error;
  } finally {
    process.off('SIGTERM', force);
    process.off('SIGINT', force);
  }
  logger.info('stopped');
}
