import { UsageError } from './cli-error.js';
import { readSettings, serveSettings, settingText, type ServeValues } from './serve-settings.js';

/**
 * The standalone server's settings (`serve`), read once at start from the environment and flags:
 * one field per entry of `SERVE_SETTINGS` (serve-settings.ts, where each is described), with
 * `baseUrl` filled in.
 */
export interface StandaloneConfig extends Omit<ServeValues, 'baseUrl'> {
  /** `BASE_URL`, or `http://localhost:<port>`. */
  baseUrl: string;
}

/**
 * Reads every variable of `SERVE_SETTINGS` (`PORT`, `HOST`, `BASE_URL`, …), then checks the rules
 * that join them: the super-admin id and secret come together, and a setting of one store is
 * refused with the other (`BACKUP_DIR` with `DATABASE_URL`, `DATABASE_*` without it) rather than
 * silently ignored. Throws a `UsageError` naming the variable and its flag.
 */
export function readConfig(env: NodeJS.ProcessEnv = process.env): StandaloneConfig {
  const values = readSettings(env);
  const postgres = values.databaseUrl !== undefined;
  for (const [, setting] of serveSettings()) {
    if (!setting.store || settingText(env, setting) === undefined) continue;
    const flag = setting.flag.split(' ')[0];
    if (setting.store === 'file' && postgres) {
      throw new UsageError(
        setting.env === 'BACKUP_DIR'
          ? "BACKUP_DIR (--backup-dir) backs up the file store; with DATABASE_URL, use the database's own backups (pg_dump, base backups)"
          : `${setting.env} (${flag}) applies to the file store, not with DATABASE_URL`,
      );
    }
    if (setting.store === 'postgres' && !postgres) {
      throw new UsageError(
        `${setting.env} (${flag}) applies to the PostgreSQL store: set DATABASE_URL (--database-url) too`,
      );
    }
  }
  checkSearchConnections(values);
  if (Boolean(values.superAdminClientId) !== Boolean(values.superAdminClientSecret)) {
    throw new UsageError(
      'Set both SUPER_ADMIN_CLIENT_ID and SUPER_ADMIN_CLIENT_SECRET (--super-admin-client-id, --super-admin-client-secret), or neither',
    );
  }
  if (Boolean(values.idpIssuer) !== Boolean(values.idpClientId)) {
    throw new UsageError('Set both IDP_ISSUER and IDP_CLIENT_ID (--idp-issuer, --idp-client-id), or neither');
  }
  if (values.idpClientSecret && values.idpPrivateKeyFile) {
    throw new UsageError(
      'Set IDP_CLIENT_SECRET (--idp-client-secret) or IDP_PRIVATE_KEY_FILE (--idp-private-key-file), not both',
    );
  }
  if (!values.idpIssuer && (values.idpClientSecret || values.idpPrivateKeyFile)) {
    throw new UsageError('IDP_CLIENT_SECRET and IDP_PRIVATE_KEY_FILE need IDP_ISSUER (--idp-issuer) too');
  }
  return { ...values, baseUrl: values.baseUrl ?? `http://localhost:${values.port}` };
}

/** The search lane's sizes against the pool's (postgresStorage checks them too, naming its options). */
function checkSearchConnections(values: ServeValues): void {
  const search = values.databaseSearchConnections;
  if (search !== undefined && search >= values.databaseMaxConnections) {
    throw new UsageError(
      'DATABASE_SEARCH_CONNECTIONS (--database-search-connections) must be less than DATABASE_MAX_CONNECTIONS (--database-max-connections): the connections searches cannot take serve reads, writes, tokens and /readyz',
    );
  }
  const perProject = values.databaseMaxProjectSearchConnections;
  if (perProject !== undefined && search !== undefined && perProject > search) {
    throw new UsageError(
      'DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS (--database-max-project-search-connections) must be at most DATABASE_SEARCH_CONNECTIONS (--database-search-connections)',
    );
  }
}
