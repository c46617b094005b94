import fs from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { FhirPlatformOptions, Storage } from '../../src/index.js';
import { tempDir } from '../helpers/temp-dir.js';

// What the standalone server hands the library for each setting: the PostgreSQL store's options
// and fhirPlatform's, captured (the store is a memory store, so no database is needed).
const seen = vi.hoisted(() => ({
  postgres: [] as Record<string, unknown>[],
  platform: [] as FhirPlatformOptions[],
}));

vi.mock('../../src/postgres.js', async () => {
  const { memoryStorage } = await import('../../src/stores.js');
  return {
    postgresStorage: (options: Record<string, unknown>): Storage => {
      seen.postgres.push(options);
      return memoryStorage();
    },
  };
});

vi.mock('../../src/index.js', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/index.js')>();
  return {
    ...original,
    fhirPlatform: (options: FhirPlatformOptions) => {
      seen.platform.push(options);
      return original.fhirPlatform(options);
    },
  };
});

const { readConfig } = await import('../../src/cli/serve-config.js');
const { startStandalone } = await import('../../src/cli/standalone.js');

const dirs: string[] = [];
afterEach(() => {
  seen.postgres.length = 0;
  seen.platform.length = 0;
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

function start(env: Record<string, string>) {
  const dir = tempDir('fpk-wiring-');
  dirs.push(dir);
  return startStandalone(readConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dir, ...env }));
}

describe('serve settings reach the library', () => {
  it('the bulk limits, as bulkExportRouter options', async () => {
    const standalone = await start({
      BULK_MAX_KICKOFFS_PER_HOUR: '5',
      BULK_MAX_RUNNING_EXPORTS: '3',
      BULK_EXPORT_THREADS: '4',
      BULK_MAX_PROJECT_EXPORT_SIZE: '2gb',
      BULK_MAX_EXPORT_SIZE: '100mb',
      BULK_MIN_FREE_SPACE: '0',
      BULK_REQUIRE_ASYNC_HEADERS: 'true',
      BULK_MAX_TYPE_FILTER_MATCHES: '7',
    });
    await standalone.close();
    expect(seen.platform[0]?.bulk).toEqual({
      requireAsyncHeaders: true,
      maxKickoffsPerHour: 5,
      maxRunningExports: 3,
      maxProjectExportSize: 2 * 1024 ** 3,
      maxExportSize: 100 * 1024 ** 2,
      minFreeSpace: 0,
      maxTypeFilterMatches: 7,
      pool: { maxThreads: 4 },
      import: {
        maxRunning: 2,
        maxInputs: 1000,
        idleTimeout: 60_000,
        manifestWait: 3_600_000,
        maxErrorsPerFile: 10_000,
      },
    });
  });

  it('the import limits, as bulkExportRouter import options', async () => {
    const standalone = await start({
      IMPORT_ALLOW_PRIVATE_ADDRESSES: 'false',
      IMPORT_MAX_RUNNING: '3',
      IMPORT_MAX_INPUTS: '10',
      IMPORT_IDLE_TIMEOUT: '5000',
      IMPORT_MANIFEST_WAIT: '60000',
      IMPORT_MAX_ERRORS_PER_FILE: '50',
    });
    await standalone.close();
    expect(seen.platform[0]?.bulk).toMatchObject({
      import: {
        allowPrivateAddresses: false,
        maxRunning: 3,
        maxInputs: 10,
        idleTimeout: 5000,
        manifestWait: 60_000,
        maxErrorsPerFile: 50,
      },
    });
  });

  it('the refresh token and authorization ticket lifetimes, as tokenRouter and authorizationRouter options', async () => {
    const standalone = await start({
      REFRESH_TOKEN_LIFETIME: '86400',
      ONLINE_REFRESH_TOKEN_LIFETIME: '3600',
      AUTHORIZE_TICKET_LIFETIME: '120',
      ALLOW_PRIVATE_JWKS_ADDRESSES: 'false',
    });
    await standalone.close();
    expect(seen.platform[0]?.token).toEqual({
      refreshTokenLifetime: 86400,
      onlineRefreshTokenLifetime: 3600,
      jwks: { allowPrivateAddresses: false },
    });
    expect(seen.platform[0]?.authorization).toEqual({ ticketLifetime: 120 });
    expect(seen.platform[0]?.project).toEqual({ allowPrivateJwksAddresses: false });
    // Unset: the library's defaults.
    const defaults = await start({});
    await defaults.close();
    expect(seen.platform[1]?.token).toEqual({
      refreshTokenLifetime: 2592000,
      onlineRefreshTokenLifetime: 43200,
    });
    expect(seen.platform[1]?.authorization).toEqual({ ticketLifetime: 600 });
  });

  it("the identity providers' key fetching, as federation.jwks options", async () => {
    const standalone = await start({
      IDP_JWKS_TIMEOUT_MS: '2000',
      IDP_JWKS_MAX_BYTES: '32kb',
      IDP_JWKS_CACHE_MAX_AGE_MS: '60000',
      IDP_JWKS_COOLDOWN_MS: '0',
      ALLOW_PRIVATE_IDP_JWKS_ADDRESSES: 'false',
    });
    await standalone.close();
    expect(seen.platform[0]?.federation).toEqual({
      jwks: {
        timeout: 2000,
        maxBytes: 32 * 1024,
        cacheMaxAge: 60000,
        cooldown: 0,
        allowPrivateAddresses: false,
      },
    });
    // Unset: the library's defaults (private addresses as NODE_ENV says).
    const defaults = await start({});
    await defaults.close();
    expect(seen.platform[1]?.federation).toEqual({
      jwks: { timeout: 5000, maxBytes: 65536, cacheMaxAge: 600000, cooldown: 30000 },
    });
  });

  it("the PostgreSQL pool's size, search lane and timeouts, the read replicas and the history retention, as postgresStorage options", async () => {
    const standalone = await start({
      DATABASE_URL: 'postgres://db.example/fhir',
      DATABASE_MAX_CONNECTIONS: '20',
      DATABASE_SEARCH_CONNECTIONS: '12',
      DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS: '4',
      DATABASE_ACQUIRE_TIMEOUT_MS: '1000',
      DATABASE_LOCK_TIMEOUT_MS: '2000',
      DATABASE_STATEMENT_TIMEOUT_MS: '3000',
      DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS: '4000',
      DATABASE_CLOSE_TIMEOUT_MS: '5000',
      DATABASE_READ_REPLICAS: 'postgres://replica-1.example/fhir, postgres://replica-2.example/fhir',
      DATABASE_REPLICA_FRESHNESS: 'primary',
      HISTORY: 'versions:3',
    });
    await standalone.close();
    expect(seen.postgres).toEqual([
      {
        connectionString: 'postgres://db.example/fhir',
        maxConnections: 20,
        searchConnections: 12,
        maxProjectSearchConnections: 4,
        acquireTimeoutMs: 1000,
        lockTimeoutMs: 2000,
        statementTimeoutMs: 3000,
        idleInTransactionTimeoutMs: 4000,
        closeTimeoutMs: 5000,
        readReplicas: ['postgres://replica-1.example/fhir', 'postgres://replica-2.example/fhir'],
        replicaFreshness: 'primary',
        history: { versions: 3 },
      },
    ]);
  });
});
