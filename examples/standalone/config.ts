import path from 'node:path';

/** The standalone server's settings, read from the environment once at start. */
export interface StandaloneConfig {
  port: number;
  host: string;
  baseUrl: string;
  dataDir: string;
  /** PostgreSQL connection string: when set, the store is PostgreSQL instead of the file store. */
  databaseUrl?: string;
  superAdminClientId?: string;
  superAdminClientSecret?: string;
}

/**
 * Reads `PORT`, `HOST`, `BASE_URL`, `DATA_DIR`, `DATABASE_URL`, `SUPER_ADMIN_CLIENT_ID` and
 * `SUPER_ADMIN_CLIENT_SECRET`.
 */
export function readConfig(env: NodeJS.ProcessEnv = process.env): StandaloneConfig {
  const portText = env.PORT || '8103';
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`PORT must be an integer from 0 to 65535, got "${portText}"`);
  }
  const host = env.HOST || '0.0.0.0';
  const baseUrl = (env.BASE_URL || `http://localhost:${port}`).replace(/\/+$/, '');
  try {
    new URL(baseUrl);
  } catch {
    throw new Error(`BASE_URL must be an absolute URL, got "${baseUrl}"`);
  }
  const clientId = env.SUPER_ADMIN_CLIENT_ID || undefined;
  const clientSecret = env.SUPER_ADMIN_CLIENT_SECRET || undefined;
  if (Boolean(clientId) !== Boolean(clientSecret)) {
    throw new Error('Set both SUPER_ADMIN_CLIENT_ID and SUPER_ADMIN_CLIENT_SECRET, or neither');
  }
  return {
    port,
    host,
    baseUrl,
    dataDir: path.resolve(env.DATA_DIR || './data'),
    ...(env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL } : {}),
    ...(clientId ? { superAdminClientId: clientId, superAdminClientSecret: clientSecret } : {}),
  };
}
