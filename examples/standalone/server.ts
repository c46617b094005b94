// A standalone server built from the package's public API, as a host would build it: every router
// at the default paths on the embedded file store, a super-admin client, protocol answers (FHIR,
// SCIM or OAuth, by path) for unrouted paths, stray errors and requests Node's parser refuses,
// server timeouts, and a clean stop on SIGTERM or Ctrl-C.
// `fhir-platform-kit serve` (`npm start`) is this plus its flags, logging, PostgreSQL and backups.
//
//   node --import tsx examples/standalone/server.ts   # in a clone; PORT, DATA_DIR, SUPER_ADMIN_CLIENT_*
//
// test/examples/standalone.test.ts starts it and drives it over HTTP.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import express from 'express';
import {
  fallbackErrorHandler,
  fhirPlatform,
  fileStorage,
  notFoundHandler,
  protectServer,
  provisionSuperAdminClient,
} from 'fhir-platform-kit';

export interface StandaloneServerOptions {
  /** The file store goes to `<dataDir>/store`, bulk export files to `<dataDir>/exports`. */
  dataDir: string;
  /** `0` picks a free port. @default 8103 */
  port?: number;
  /** @default '0.0.0.0' */
  host?: string;
  /** The super-admin client; without a secret, one is generated on the first start. @default {} */
  superAdmin?: { clientId?: string; clientSecret?: string };
}

export interface StandaloneServer {
  server: Server;
  /** `http://localhost:<port>`: the origin in every URL the server hands out. */
  baseUrl: string;
  /** The super-admin client id, and its secret when this start generated it (shown once). */
  superAdmin: { clientId: string; clientSecret: string | undefined };
  /** Stops accepting connections, stops the export workers, then closes the store. */
  close(): Promise<void>;
}

export async function startStandaloneServer(options: StandaloneServerOptions): Promise<StandaloneServer> {
  const storage = await fileStorage({ dir: path.join(options.dataDir, 'store') });
  try {
    const superAdmin = await provisionSuperAdminClient(storage, options.superAdmin);
    // The port is known once listening: the platform takes the origin per request instead, from
    // the Host header, until then. A deployment behind a proxy sets `baseUrl` (and `trust proxy`).
    const platform = fhirPlatform({ storage, exportDir: path.join(options.dataDir, 'exports') });
    const app = express();
    app.disable('x-powered-by');
    app.use(platform.router);
    // Each in the protocol of its path (`errorPaths`: the platform's mounts), never Express's HTML.
    const { errorPaths } = platform;
    app.use(notFoundHandler({ errorPaths }));
    app.use(fallbackErrorHandler({ errorPaths }));
    const server = protectServer(createServer(app), { errorPaths });
    server.listen(options.port ?? 8103, options.host ?? '0.0.0.0');
    await once(server, 'listening');
    await platform.ready;
    const { port } = server.address() as AddressInfo;
    return {
      server,
      baseUrl: `http://localhost:${port}`,
      superAdmin: { clientId: superAdmin.clientId, clientSecret: superAdmin.clientSecret },
      close: async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        server.closeIdleConnections();
        await platform.close();
        await closed;
        await storage.close();
      },
    };
  } catch (error) {
    await storage.close();
    throw error;
  }
}

// Run directly: configured by the README's environment variables.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { PORT, DATA_DIR, SUPER_ADMIN_CLIENT_ID, SUPER_ADMIN_CLIENT_SECRET } = process.env;
  const running = await startStandaloneServer({
    dataDir: DATA_DIR ?? './data',
    port: PORT ? Number(PORT) : 8103,
    superAdmin: {
      ...(SUPER_ADMIN_CLIENT_ID ? { clientId: SUPER_ADMIN_CLIENT_ID } : {}),
      ...(SUPER_ADMIN_CLIENT_SECRET ? { clientSecret: SUPER_ADMIN_CLIENT_SECRET } : {}),
    },
  });
  console.log(`listening on ${running.baseUrl}`);
  if (running.superAdmin.clientSecret) {
    console.error(
      `super-admin client created (shown once): ${running.superAdmin.clientId} ${running.superAdmin.clientSecret}`,
    );
  }
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      void running.close().then(() => process.exit(0));
    });
  }
}
