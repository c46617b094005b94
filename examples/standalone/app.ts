import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { createServer, type Server } from 'node:http';
import path from 'node:path';
import express from 'express';
import {
  fhirErrorHandler,
  fhirPlatform,
  fileStorage,
  notFoundHandler,
  protectServer,
  postgresStorage,
  provisionSuperAdminClient,
  type Storage,
} from '../../src/index.js';
import type { StandaloneConfig } from './config.js';

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
 * Starts the standalone server: every router mounted at the default paths on the embedded file store
 * under `config.dataDir` (`store/` for the data, `exports/` for bulk export files), or on PostgreSQL
 * when `config.databaseUrl` is set (export files still go under `config.dataDir`).
 */
export async function startStandalone(config: StandaloneConfig): Promise<Standalone> {
  const storage = config.databaseUrl
    ? postgresStorage({ connectionString: config.databaseUrl })
    : await fileStorage({ dir: path.join(config.dataDir, 'store') });
  try {
    const admin = await provisionSuperAdminClient(storage, {
      ...(config.superAdminClientId ? { clientId: config.superAdminClientId } : {}),
      ...(config.superAdminClientSecret ? { clientSecret: config.superAdminClientSecret } : {}),
    });
    const platform = fhirPlatform({
      storage,
      baseUrl: config.baseUrl,
      exportDir: path.join(config.dataDir, 'exports'),
      scimBasicAuth: true,
      scim: {
        echoUserName: config.scimEchoUserName,
        ...(config.scimDefaultUserType ? { defaultUserType: config.scimDefaultUserType } : {}),
      },
      bulk: { requireAsyncHeaders: config.bulkRequireAsyncHeaders },
    });
    const app = express();
    app.disable('x-powered-by');
    app.use(platform.router);
    // Anything the platform does not route answers JSON, never Express's HTML pages.
    app.use(notFoundHandler());
    app.use(fhirErrorHandler());
    // Timeouts and JSON answers to requests Node's parser refuses; expired requests are looked
    // for every 2 s (Node's default is 30 s).
    const server = protectServer(createServer({ connectionsCheckingInterval: 2000 }, app));
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
          await platform.close();
          await closed;
          await storage.close();
        })()),
    };
  } catch (error) {
    await storage.close();
    throw error;
  }
}
