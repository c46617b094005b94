import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import path from 'node:path';
import express from 'express';
import {
  fallbackErrorHandler,
  fhirPlatform,
  fileStorage,
  notFoundHandler,
  protectServer,
  provisionSuperAdminClient,
  r4Terminology,
  StorageLockedError,
  type FhirPlatform,
  type FhirPlatformOptions,
  type IdentityProviderJwksOptions,
  type Logger,
  type ProjectIdentityProvider,
  type Storage,
} from '../index.js';
import { CliError, EXIT } from './cli-error.js';
import type { StandaloneConfig } from './serve-config.js';

/** A running standalone server. */
export interface Standalone {
  server: Server;
  /** The origin it answers on (`BASE_URL`). */
  baseUrl: string;
  storage: Storage;
  /** The super-admin client's id. */
  superAdminClientId: string;
  /** Super-admin credentials generated on this start (shown once), if any. */
  generatedSuperAdmin?: { clientId: string; clientSecret: string };
  /** Stops accepting connections, stops export workers, flushes and closes the store. */
  close(): Promise<void>;
}

/** A failed `listen` said in terms of the settings that cause it; other errors as they are. */
function listenError(error: unknown, config: StandaloneConfig): unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const where = `${config.host}:${config.port}`;
  const message =
    code === 'EADDRINUSE'
      ? `Cannot listen on ${where}: the port is in use (another server?). Stop it, or choose another port with PORT (--port)`
      : code === 'EADDRNOTAVAIL'
        ? `Cannot listen on ${where}: ${config.host} is not an address of this machine. Set HOST (--host) to one of its addresses, or 0.0.0.0 for all`
        : code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_NONAME'
          ? `Cannot listen on ${where}: the host name does not resolve. Set HOST (--host) to an address of this machine, or 0.0.0.0 for all`
          : code === 'EACCES'
            ? `Cannot listen on ${where}: permission denied (ports below 1024 need privileges). Choose another port with PORT (--port)`
            : undefined;
  return message ? new CliError(message, EXIT.failure, { cause: error }) : error;
}

/**
 * A directory of `DATA_DIR` locked by another process (the file store, or the audit journal every
 * instance keeps there, PostgreSQL or not) said as what to do; other errors as they are.
 */
function dataDirError(error: unknown, config: StandaloneConfig): unknown {
  if (!(error instanceof StorageLockedError)) return error;
  const advice = config.databaseUrl
    ? 'Each instance needs its own DATA_DIR (--data-dir), even instances sharing one DATABASE_URL'
    : 'Stop it, or give each instance its own DATA_DIR (--data-dir); instances that serve the same data share a DATABASE_URL, each with its own DATA_DIR';
  return new CliError(
    `${error.message}: another process (another server?) uses this DATA_DIR. ${advice}`,
    EXIT.failure,
    {
      cause: error,
    },
  );
}

/** How identity providers' keys are fetched (`IDP_JWKS_*`); unset private addresses: the default. */
function identityProviderJwks(config: StandaloneConfig): IdentityProviderJwksOptions {
  return {
    timeout: config.idpJwksTimeoutMs,
    maxBytes: config.idpJwksMaxBytes,
    cacheMaxAge: config.idpJwksCacheMaxAgeMs,
    cooldown: config.idpJwksCooldownMs,
    ...(config.allowPrivateIdpJwksAddresses === undefined
      ? {}
      : { allowPrivateAddresses: config.allowPrivateIdpJwksAddresses }),
  };
}

/** The identity provider of projects that set none (`IDP_*`); the key file read now. */
async function defaultIdentityProvider(config: StandaloneConfig): Promise<ProjectIdentityProvider> {
  let privateKey: Record<string, unknown> | undefined;
  if (config.idpPrivateKeyFile) {
    try {
      privateKey = JSON.parse(await readFile(config.idpPrivateKeyFile, 'utf8')) as Record<string, unknown>;
    } catch (error) {
      throw new CliError(
        `IDP_PRIVATE_KEY_FILE (--idp-private-key-file): cannot read a JWK from ${config.idpPrivateKeyFile}`,
        EXIT.failure,
        { cause: error },
      );
    }
  }
  return {
    issuer: config.idpIssuer!,
    clientId: config.idpClientId!,
    ...(config.idpClientSecret ? { clientSecret: config.idpClientSecret } : {}),
    ...(privateKey ? { privateKey } : {}),
    scope: config.idpScope,
    claim: config.idpClaim,
    matchAttribute: config.idpMatch,
  };
}

/**
 * The super-admin client (`SUPER_ADMIN_CLIENT_ID`, `SUPER_ADMIN_CLIENT_SECRET`, or a secret
 * generated now), provisioned once the server listens and the platform's start has settled: a
 * start that cannot listen rejects before it, and creates no credentials.
 */
async function provisionOnceListening(
  listened: Promise<unknown>,
  platform: FhirPlatform,
  storage: Storage,
  config: StandaloneConfig,
): Promise<Awaited<ReturnType<typeof provisionSuperAdminClient>>> {
  await listened;
  await platform.ready;
  return provisionSuperAdminClient(storage, {
    ...(config.superAdminClientId ? { clientId: config.superAdminClientId } : {}),
    ...(config.superAdminClientSecret ? { clientSecret: config.superAdminClientSecret } : {}),
  });
}

/**
 * The store: PostgreSQL when `config.databaseUrl` is set, else the embedded file store under
 * `config.dataDir/store` (a data directory it cannot use is named in the error).
 */
async function openStorage(config: StandaloneConfig): Promise<Storage> {
  // The PostgreSQL adapter (and `pg`) is loaded only when it is used.
  return config.databaseUrl
    ? (await import('../postgres.js')).postgresStorage({
        connectionString: config.databaseUrl,
        maxConnections: config.databaseMaxConnections,
        ...(config.databaseSearchConnections !== undefined
          ? { searchConnections: config.databaseSearchConnections }
          : {}),
        ...(config.databaseMaxProjectSearchConnections !== undefined
          ? { maxProjectSearchConnections: config.databaseMaxProjectSearchConnections }
          : {}),
        acquireTimeoutMs: config.databaseAcquireTimeoutMs,
        lockTimeoutMs: config.databaseLockTimeoutMs,
        statementTimeoutMs: config.databaseStatementTimeoutMs,
        idleInTransactionTimeoutMs: config.databaseIdleInTransactionTimeoutMs,
        closeTimeoutMs: config.databaseCloseTimeoutMs,
        ...(config.databaseReadReplicas ? { readReplicas: config.databaseReadReplicas } : {}),
        replicaFreshness: config.databaseReplicaFreshness,
        history: config.history,
      })
    : await fileStorage({ dir: path.join(config.dataDir, 'store'), history: config.history }).catch(
        (error: unknown) => {
          throw dataDirError(error, config);
        },
      );
}

/** The platform's options from the settings: every router at its default path, the audit journal under `dataDir`. */
async function platformOptions(
  config: StandaloneConfig,
  storage: Storage,
  logging: { logger?: Logger; logRequests?: boolean },
): Promise<FhirPlatformOptions> {
  return {
    storage,
    // Errors always go to the logger; one line per request too when asked (`serve` does).
    ...(logging.logger ? { logger: logging.logger, logRequests: logging.logRequests ?? false } : {}),
    baseUrl: config.baseUrl,
    exportDir: path.join(config.dataDir, 'exports'),
    scimBasicAuth: true,
    scim: {
      echoUserName: config.scimEchoUserName,
      ...(config.scimDefaultUserType ? { defaultUserType: config.scimDefaultUserType } : {}),
    },
    bulk: {
      requireAsyncHeaders: config.bulkRequireAsyncHeaders,
      maxKickoffsPerHour: config.bulkMaxKickoffsPerHour,
      maxRunningExports: config.bulkMaxRunningExports,
      maxProjectExportSize: config.bulkMaxProjectExportSize,
      maxExportSize: config.bulkMaxExportSize,
      maxTypeFilterMatches: config.bulkMaxTypeFilterMatches,
      minFreeSpace: config.bulkMinFreeSpace,
      pool: { maxThreads: config.bulkExportThreads },
      import: {
        ...(config.importAllowPrivateAddresses === undefined
          ? {}
          : { allowPrivateAddresses: config.importAllowPrivateAddresses }),
        maxRunning: config.importMaxRunning,
        maxInputs: config.importMaxInputs,
        idleTimeout: config.importIdleTimeout,
        manifestWait: config.importManifestWait,
        maxErrorsPerFile: config.importMaxErrorsPerFile,
      },
    },
    fhir: {
      defaultReturn: config.fhirDefaultReturn,
      searchAdmission: {
        maxConcurrent: config.searchMaxConcurrent,
        maxQueued: config.searchMaxQueued,
        maxWaitMs: config.searchMaxWaitMs,
      },
      searchTimeoutMs: config.searchTimeoutMs,
      searchLimits: {
        maxSortKeys: config.searchMaxSortKeys,
        maxFilters: config.searchMaxParameters,
        maxHasDepth: config.searchMaxHasDepth,
        maxOffset: config.searchMaxOffset,
        maxAccurateTotal: config.searchMaxAccurateTotal,
        maxTerminologyCodes: config.searchMaxTerminologyCodes,
      },
      terminology: r4Terminology({ maxExpansionSize: config.terminologyMaxExpansion }),
      maxPatchOperations: config.fhirMaxPatchOperations,
      maxPatchedResourceSize: config.fhirMaxPatchedResourceSize,
    },
    federation: {
      ...(config.idpIssuer && config.idpClientId
        ? { defaultProvider: await defaultIdentityProvider(config) }
        : {}),
      jwks: identityProviderJwks(config),
    },
    token: {
      refreshTokenLifetime: config.refreshTokenLifetime,
      onlineRefreshTokenLifetime: config.onlineRefreshTokenLifetime,
      // Registration and fetching follow one setting; unset leaves their default.
      ...(config.allowPrivateJwksAddresses === undefined
        ? {}
        : { jwks: { allowPrivateAddresses: config.allowPrivateJwksAddresses } }),
    },
    authorization: { ticketLifetime: config.authorizeTicketLifetime },
    ...(config.allowPrivateJwksAddresses === undefined
      ? {}
      : { project: { allowPrivateJwksAddresses: config.allowPrivateJwksAddresses } }),
    // Durable audit: an acknowledged request's event survives the process being killed.
    audit: {
      journalDir: path.join(config.dataDir, 'audit-journal'),
      maxUrlLength: config.auditMaxUrlLength,
      refusalWindowMs: config.auditRefusalWindowMs,
      maxRefusalSources: config.auditMaxRefusalSources,
    },
  };
}

/**
 * Starts the standalone server (`fhir-platform-kit serve`, `npm start`): every router mounted at
 * the default paths on the embedded file store under `config.dataDir` (`store/` for the data,
 * `exports/` for bulk export files), or on PostgreSQL when `config.databaseUrl` is set (export
 * files then live in the database too).
 *
 * The super-admin client is provisioned last, once the server listens: a start that fails (a port
 * in use, a bad `HOST`) creates no credentials, so the first start that succeeds is the one that
 * shows the generated secret. Until it is written the platform holds readiness (`/readyz` 503 with
 * `superAdmin: 'pending'`, every other route 503). A failed start closes what it opened, the
 * platform before the store.
 */
export async function startStandalone(
  config: StandaloneConfig,
  logging: { logger?: Logger; logRequests?: boolean } = {},
): Promise<Standalone> {
  const storage = await openStorage(config);
  let platform: FhirPlatform | undefined;
  let server: Server | undefined;
  try {
    platform = fhirPlatform(await platformOptions(config, storage, logging));
    const app = express();
    app.disable('x-powered-by');
    app.use(platform.router);
    // Anything the platform does not route answers JSON, never Express's HTML pages: in the
    // protocol of the path (SCIM under the SCIM mount, OAuth at the token and JWKS endpoints).
    const { errorPaths } = platform;
    app.use(notFoundHandler({ errorPaths }));
    app.use(fallbackErrorHandler({ errorPaths }));
    // Timeouts and JSON answers to requests Node's parser refuses; expired requests are looked
    // for every 2 s (Node's default is 30 s).
    const listening = protectServer(createServer({ connectionsCheckingInterval: 2000 }, app), {
      maxConnectionsPerAddress: config.maxConnectionsPerAddress,
      errorPaths,
    });
    server = listening;
    const listened = once(listening, 'listening');
    // Held from before the first connection: /readyz answers 200, and the routes answer at all,
    // only once the configured super-admin credentials work.
    const provisioned = provisionOnceListening(listened, platform, storage, config);
    platform.holdReadiness('superAdmin', provisioned);
    listening.listen(config.port, config.host);
    try {
      await listened;
    } catch (error) {
      server = undefined; // never listened: nothing to close
      throw listenError(error, config);
    }
    // Last: nothing after it can fail, so a generated secret always reaches the caller.
    const admin = await provisioned;
    const port = (listening.address() as AddressInfo).port;
    const baseUrl = config.port === 0 ? config.baseUrl.replace(/:0$/, `:${port}`) : config.baseUrl;
    const running = platform;
    let closing: Promise<void> | undefined;
    return {
      server: listening,
      baseUrl,
      storage,
      superAdminClientId: admin.clientId,
      ...(admin.clientSecret
        ? { generatedSuperAdmin: { clientId: admin.clientId, clientSecret: admin.clientSecret } }
        : {}),
      close: () =>
        (closing ??= (async () => {
          const closed = new Promise<void>((resolve) => listening.close(() => resolve()));
          listening.closeIdleConnections();
          // Requests still running after the grace period are cut: a stuck one (a slow upload, a
          // wait on the database) must not hold the shutdown.
          const cut = setTimeout(() => listening.closeAllConnections(), config.shutdownTimeoutMs);
          cut.unref();
          try {
            await running.close();
            await closed;
          } finally {
            clearTimeout(cut);
          }
          await storage.close();
        })()),
    };
  } catch (error) {
    // The platform's background work (export resume, the audit trail) stops before the store
    // closes under it.
    if (server) {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server!.close(() => resolve()));
    }
    await platform?.close();
    await storage.close();
    throw dataDirError(error, config);
  }
}
