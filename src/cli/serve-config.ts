import path from 'node:path';
import { UsageError } from './cli-error.js';
import type { ProfileType } from '../index.js';

const PROFILE_TYPES: readonly ProfileType[] = ['Patient', 'Practitioner', 'RelatedPerson'];

/** The standalone server's settings (`serve`), read once at start from the environment and flags. */
export interface StandaloneConfig {
  port: number;
  host: string;
  baseUrl: string;
  dataDir: string;
  /** PostgreSQL connection string: when set, the store is PostgreSQL instead of the file store. */
  databaseUrl?: string;
  superAdminClientId?: string;
  superAdminClientSecret?: string;
  /** SCIM `defaultUserType`: the profile type of a user created without `userType`. */
  scimDefaultUserType?: ProfileType;
  /** SCIM `echoUserName`: answer the `userName` the identity provider sent. */
  scimEchoUserName: boolean;
  /** Bulk kick-offs without `Accept` or `Prefer: respond-async` answer 400 (`requireAsyncHeaders`). */
  bulkRequireAsyncHeaders: boolean;
  /** FHIR `defaultReturn`: what writes answer without `Prefer: return=`. */
  fhirDefaultReturn: 'representation' | 'minimal';
  /**
   * Open connections allowed per client address (`protectServer`'s `maxConnectionsPerAddress`);
   * `Infinity` behind a proxy, whose address every connection then has.
   */
  maxConnectionsPerAddress: number;
  /** File store only: where a `SIGUSR2` writes a backup of the running store (one new directory each). */
  backupDir?: string;
  /**
   * Milliseconds a shutdown waits for requests in flight before cutting their connections.
   * @default 10000
   */
  shutdownTimeoutMs?: number;
  /**
   * Register and fetch `jwksUri`s on loopback, private and link-local addresses (`projectRouter`'s
   * `allowPrivateJwksAddresses`, `tokenRouter`'s `jwks.allowPrivateAddresses`); undefined leaves
   * their default (allowed unless `NODE_ENV=production`).
   */
  allowPrivateJwksAddresses?: boolean;
}

/**
 * Reads `PORT`, `HOST`, `BASE_URL`, `DATA_DIR`, `DATABASE_URL`, `SUPER_ADMIN_CLIENT_ID`,
 * `SUPER_ADMIN_CLIENT_SECRET`, `SCIM_DEFAULT_USER_TYPE`, `SCIM_ECHO_USER_NAME`,
 * `BULK_REQUIRE_ASYNC_HEADERS`, `FHIR_DEFAULT_RETURN`, `MAX_CONNECTIONS_PER_ADDRESS`, `BACKUP_DIR`
 * and `ALLOW_PRIVATE_JWKS_ADDRESSES`.
 */
export function readConfig(env: NodeJS.ProcessEnv = process.env): StandaloneConfig {
  const portText = env.PORT || '8103';
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new UsageError(`PORT (--port) must be an integer from 0 to 65535, got "${portText}"`);
  }
  const host = env.HOST || '0.0.0.0';
  const baseUrl = (env.BASE_URL || `http://localhost:${port}`).replace(/\/+$/, '');
  try {
    new URL(baseUrl);
  } catch {
    throw new UsageError(`BASE_URL (--base-url) must be an absolute URL, got "${baseUrl}"`);
  }
  const clientId = env.SUPER_ADMIN_CLIENT_ID || undefined;
  const clientSecret = env.SUPER_ADMIN_CLIENT_SECRET || undefined;
  if (Boolean(clientId) !== Boolean(clientSecret)) {
    throw new UsageError(
      'Set both SUPER_ADMIN_CLIENT_ID and SUPER_ADMIN_CLIENT_SECRET (--super-admin-client-id, --super-admin-client-secret), or neither',
    );
  }
  const typeText = env.SCIM_DEFAULT_USER_TYPE?.trim() || undefined;
  const scimDefaultUserType = typeText
    ? PROFILE_TYPES.find((t) => t.toLowerCase() === typeText.toLowerCase())
    : undefined;
  if (typeText && !scimDefaultUserType) {
    throw new UsageError(
      `SCIM_DEFAULT_USER_TYPE (--scim-default-user-type) must be one of ${PROFILE_TYPES.join(', ')}, got "${typeText}"`,
    );
  }
  const echoText = env.SCIM_ECHO_USER_NAME?.trim().toLowerCase() || 'false';
  if (echoText !== 'true' && echoText !== 'false') {
    throw new UsageError(
      `SCIM_ECHO_USER_NAME (--scim-echo-user-name) must be true or false, got "${env.SCIM_ECHO_USER_NAME}"`,
    );
  }
  const requireAsync = env.BULK_REQUIRE_ASYNC_HEADERS?.trim().toLowerCase() || 'false';
  if (requireAsync !== 'true' && requireAsync !== 'false') {
    throw new UsageError(
      `BULK_REQUIRE_ASYNC_HEADERS (--bulk-require-async-headers) must be true or false, got "${env.BULK_REQUIRE_ASYNC_HEADERS}"`,
    );
  }
  const defaultReturn = env.FHIR_DEFAULT_RETURN?.trim().toLowerCase() || 'representation';
  if (defaultReturn !== 'representation' && defaultReturn !== 'minimal') {
    throw new UsageError(
      `FHIR_DEFAULT_RETURN (--fhir-default-return) must be representation or minimal, got "${env.FHIR_DEFAULT_RETURN}"`,
    );
  }
  const perAddressText = env.MAX_CONNECTIONS_PER_ADDRESS?.trim() || '128';
  const maxConnectionsPerAddress = /^infinity$/i.test(perAddressText)
    ? Number.POSITIVE_INFINITY
    : Number(perAddressText);
  if (
    maxConnectionsPerAddress !== Number.POSITIVE_INFINITY &&
    !(Number.isInteger(maxConnectionsPerAddress) && maxConnectionsPerAddress > 0)
  ) {
    throw new UsageError(
      `MAX_CONNECTIONS_PER_ADDRESS (--max-connections-per-address) must be a positive integer or Infinity, got "${perAddressText}"`,
    );
  }
  const backupDir = env.BACKUP_DIR?.trim() || undefined;
  if (backupDir && env.DATABASE_URL) {
    throw new UsageError(
      "BACKUP_DIR (--backup-dir) backs up the file store; with DATABASE_URL, use the database's own backups (pg_dump, base backups)",
    );
  }
  const privateJwks = env.ALLOW_PRIVATE_JWKS_ADDRESSES?.trim().toLowerCase() || undefined;
  if (privateJwks !== undefined && privateJwks !== 'true' && privateJwks !== 'false') {
    throw new UsageError(
      `ALLOW_PRIVATE_JWKS_ADDRESSES (--allow-private-jwks-addresses) must be true or false, got "${env.ALLOW_PRIVATE_JWKS_ADDRESSES}"`,
    );
  }
  return {
    port,
    host,
    baseUrl,
    dataDir: path.resolve(env.DATA_DIR || './data'),
    ...(env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL } : {}),
    ...(clientId ? { superAdminClientId: clientId, superAdminClientSecret: clientSecret } : {}),
    ...(scimDefaultUserType ? { scimDefaultUserType } : {}),
    scimEchoUserName: echoText === 'true',
    bulkRequireAsyncHeaders: requireAsync === 'true',
    fhirDefaultReturn: defaultReturn,
    maxConnectionsPerAddress,
    ...(backupDir ? { backupDir: path.resolve(backupDir) } : {}),
    ...(privateJwks ? { allowPrivateJwksAddresses: privateJwks === 'true' } : {}),
  };
}
