import { once } from 'node:events';
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
  type Logger,
  type Storage,
} from '../index.js';
import type { StandaloneConfig } from './serve-config.js';

/** A running standalone server. */
export interface Standalone {
  server: Server;
  /** The origin it answers on (`BASE_URL`). */
  baseUrl: string;
  storage: Storage;
  /** Super-admin credentials generated on this start (shown once), if any. */
  generatedSuperAdmin?: { clientId: string; clientSecret: string };
  /** Stops accepting connections, stops export workers, flushes and closes the store. */
  close(): Promise<void>;
}

/**
 * Starts the standalone server (`fhir-platform-kit serve`, `npm start`): every router mounted at the default paths on the embedded file store
 * under `config.dataDir` (`store/` for the data, `exports/` for bulk export files), or on PostgreSQL
 * when `config.databaseUrl` is set (export files then live in the database too).
 */
export async function startStandalone(
  config: StandaloneConfig,
  logging: { logger?: Logger; logRequests?: boolean } = {},
): Promise<Standalone> {
  // The PostgreSQL adapter (and `pg`) is loaded only when it is used.
  const storage = config.databaseUrl
    ? (await import('../postgres.js')).postgresStorage({ connectionString: config.databaseUrl })
    : await fileStorage({ dir: path.join(config.dataDir, 'store') });
  try {
    const admin = await provisionSuperAdminClient(storage, {
      ...(config.superAdminClientId ? { clientId: config.superAdminClientId } : {}),
      ...(config.superAdminClientSecret ? { clientSecret: config.superAdminClientSecret } : {}),
    });
    const privateJwks = config.allowPrivateJwksAddresses;
    const platform = fhirPlatform({
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
      bulk: { requireAsyncHeaders: config.bulkRequireAsyncHeaders },
      fhir: { defaultReturn: config.fhirDefaultReturn },
      // Registration and fetching follow one setting.
      ...(privateJwks === undefined
        ? {}
        : {
            project: { allowPrivateJwksAddresses: privateJwks },
            token: { jwks: { allowPrivateAddresses: privateJwks } },
          }),
      // Durable audit: an acknowledged request's event survives the process being killed.
      audit: { journalDir: path.join(config.dataDir, 'audit-journal') },
    });
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
    const server = protectServer(createServer({ connectionsCheckingInterval: 2000 }, app), {
      maxConnectionsPerAddress: config.maxConnectionsPerAddress,
      errorPaths,
    });
    server.listen(config.port, config.host);
    await once(server, 'listening');
    await platform.ready;
    const port = (server.address() as AddressInfo).port;
    const baseUrl = config.port === 0 ? config.baseUrl.replace(/:0$/, `:${port}`) : config.baseUrl;
    let closing: Promise<void> | undefined;
    return {
      server,
      baseUrl,
      storage,
      ...(admin.clientSecret
        ? { generatedSuperAdmin: { clientId: admin.clientId, clientSecret: admin.clientSecret } }
        : {}),
      close: () =>
        (closing ??= (async () => {
          const closed = new Promise<void>((resolve) => server.close(() => resolve()));
          server.closeIdleConnections();
          // Requests still running after the grace period are cut: a stuck one (a slow upload, a
          // wait on the database) must not hold the shutdown.
          const cut = setTimeout(() => server.closeAllConnections(), config.shutdownTimeoutMs ?? 10_000);
          cut.unref();
          try {
            await platform.close();
            await closed;
          } finally {
            clearTimeout(cut);
          }
          await storage.close();
        })()),
    };
  } catch (error) {
    await storage.close();
    throw error;
  }
}
