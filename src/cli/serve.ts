import { pino } from 'pino';
import { readConfig } from './serve-config.js';
import { serveEnvironment, type ServeFlags } from './serve-settings.js';
import { backupOnSignal } from './backup-signal.js';
import { startStandalone } from './standalone.js';

/**
 * `fhir-platform-kit serve`: runs the standalone server until SIGTERM or SIGINT, logging JSON lines
 * (pino) on stdout. With `BACKUP_DIR`, each SIGUSR2 backs the file store up there. A super-admin
 * secret generated on the first start is written once to stderr as plain text, never into the log.
 * Resolves when the server has stopped.
 */
export async function serve(flags: ServeFlags, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const config = readConfig(serveEnvironment(flags, env));
  const logger = pino({ name: 'fhir-platform-kit', level: config.logLevel });
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
  } else if (!config.superAdminClientSecret) {
    // A later start prints nothing: say where the secret went and how to get a new one.
    logger.info(
      { clientId: standalone.superAdminClientId },
      'super-admin client exists; its secret was shown when it was created (a new one: fhir-platform-kit rotate-super-admin-secret)',
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
