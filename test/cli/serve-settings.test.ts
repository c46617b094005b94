import fs from 'node:fs';
import { DEFAULT_MAX_EXPANSION_SIZE } from '../../src/terminology/r4-terminology.js';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { SERVE_DOCS_PAGES, serveTableCells, serveTableCellsIn } from '../../scripts/serve-docs.js';
import { resolveAuditOptions } from '../../src/audit/options.js';
import { ExportPool } from '../../src/bulk/export-pool.js';
import { resolveIdentityProviderJwksOptions } from '../../src/auth/federation/identity-provider-keys.js';
import { resolveTokenEndpointConfig } from '../../src/auth/token/token-router.js';
import { resolveBulkExportRouterOptions } from '../../src/bulk/router-options.js';
import { resolveFhirRouterOptions } from '../../src/fhir/router-options.js';
import { buildProgram } from '../../src/cli/program.js';
import { readConfig } from '../../src/cli/serve-config.js';
import {
  readSettings,
  SERVE_SETTINGS,
  serveEnvironment,
  serveSettings,
  type ServeSettingKey,
} from '../../src/cli/serve-settings.js';
import { POSTGRES_POOL_DEFAULTS } from '../../src/storage/postgres/postgres-storage.js';
import {
  defaultProjectSearchConnections,
  defaultSearchConnections,
} from '../../src/storage/postgres/search-lane.js';
import { memoryStorage } from '../../src/stores.js';
import { testAuthenticate } from '../helpers/test-auth.js';

const REPO = path.resolve(import.meta.dirname, '../..');
const invalid = (expected: string): never => {
  throw new Error(expected);
};

describe('SERVE_SETTINGS: one definition per setting', () => {
  it('gives every setting a commander option whose attribute is its key', () => {
    const serve = buildProgram().commands.find((c) => c.name() === 'serve')!;
    const options = serve.options.filter((o) => o.long !== '--help');
    expect(options.map((o) => o.attributeName())).toEqual(Object.keys(SERVE_SETTINGS));
    for (const option of options) {
      const setting = SERVE_SETTINGS[option.attributeName() as ServeSettingKey];
      expect(option.flags).toBe(setting.flag);
      expect(option.description).toContain(setting.env);
    }
  });

  it('names every environment variable the standalone server reads', () => {
    // Any `env.NAME` or `env['NAME']` in the code serve runs must be a setting of the table.
    const files = [
      'serve.ts',
      'serve-config.ts',
      'serve-settings.ts',
      'serve-settings-store.ts',
      'serve-settings-data.ts',
      'serve-settings-identity.ts',
      'standalone.ts',
      'backup-signal.ts',
    ];
    const named = new Set(Object.values(SERVE_SETTINGS).map((s) => s.env));
    for (const file of files) {
      const source = fs.readFileSync(path.join(REPO, 'src/cli', file), 'utf8');
      for (const [, name] of source.matchAll(/env(?:\.|\[['"])([A-Z][A-Z0-9_]*)/g)) {
        expect(named, `${file} reads ${name}`).toContain(name);
      }
    }
    expect(named).toContain('LOG_LEVEL');
  });

  it('shows each default as the value it stands for', () => {
    for (const [key, setting] of serveSettings()) {
      const unset = setting.read(undefined, invalid);
      if (unset === undefined || setting.defaultText === undefined || key === 'dataDir') continue;
      expect(setting.read(setting.defaultText, invalid), key).toEqual(unset);
    }
    expect(readConfig({}).dataDir).toBe(path.resolve('./data'));
  });

  it('reads HISTORY as the stores read their history option', () => {
    expect(readSettings({}).history).toBe('all');
    expect(readSettings({ HISTORY: 'ALL' }).history).toBe('all');
    expect(readSettings({ HISTORY: 'versions:3' }).history).toEqual({ versions: 3 });
    expect(readSettings({ HISTORY: 'Days:30' }).history).toEqual({ days: 30 });
    for (const bad of ['versions:0', 'versions', 'days:-1', 'weeks:2', 'versions:1.5'])
      expect(() => readSettings({ HISTORY: bad }), bad).toThrow(/HISTORY/);
  });

  it("has the library's defaults for the library's options", async () => {
    const values = readSettings({});
    const bulk = resolveBulkExportRouterOptions({ storage: memoryStorage(), authenticate: testAuthenticate });
    expect({
      maxKickoffsPerHour: values.bulkMaxKickoffsPerHour,
      maxRunningExports: values.bulkMaxRunningExports,
      maxProjectExportSize: values.bulkMaxProjectExportSize,
      maxExportSize: values.bulkMaxExportSize,
      minFreeSpace: values.bulkMinFreeSpace,
      maxTypeFilterMatches: values.bulkMaxTypeFilterMatches,
    }).toEqual({
      maxKickoffsPerHour: bulk.maxKickoffsPerHour,
      maxRunningExports: bulk.maxRunningExports,
      maxProjectExportSize: bulk.maxProjectExportSize,
      maxExportSize: bulk.maxExportSize,
      minFreeSpace: bulk.minFreeSpace,
      maxTypeFilterMatches: bulk.maxTypeFilterMatches,
    });
    expect(values.bulkMaxKickoffsPerHour).toBe(1000);
    const pool = new ExportPool();
    expect(values.bulkExportThreads).toBe(pool.maxThreads);
    await pool.close();
    expect({
      maxConnections: values.databaseMaxConnections,
      acquireTimeoutMs: values.databaseAcquireTimeoutMs,
      lockTimeoutMs: values.databaseLockTimeoutMs,
      statementTimeoutMs: values.databaseStatementTimeoutMs,
      idleInTransactionTimeoutMs: values.databaseIdleInTransactionTimeoutMs,
      closeTimeoutMs: values.databaseCloseTimeoutMs,
    }).toEqual(POSTGRES_POOL_DEFAULTS);
    const token = resolveTokenEndpointConfig({ storage: memoryStorage() });
    expect({
      refreshTokenLifetime: values.refreshTokenLifetime,
      onlineRefreshTokenLifetime: values.onlineRefreshTokenLifetime,
    }).toEqual({
      refreshTokenLifetime: token.refreshTokenLifetime,
      onlineRefreshTokenLifetime: token.onlineRefreshTokenLifetime,
    });
    const idpJwks = resolveIdentityProviderJwksOptions('test');
    expect({
      timeout: values.idpJwksTimeoutMs,
      maxBytes: values.idpJwksMaxBytes,
      cacheMaxAge: values.idpJwksCacheMaxAgeMs,
      cooldown: values.idpJwksCooldownMs,
    }).toEqual({
      timeout: idpJwks.timeout,
      maxBytes: idpJwks.maxBytes,
      cacheMaxAge: idpJwks.cacheMaxAge,
      cooldown: idpJwks.cooldown,
    });
    const fhir = resolveFhirRouterOptions(
      { storage: memoryStorage(), authenticate: testAuthenticate },
      () => () => [],
    );
    expect({
      maxConcurrent: values.searchMaxConcurrent,
      maxQueued: values.searchMaxQueued,
      maxWaitMs: values.searchMaxWaitMs,
      timeoutMs: values.searchTimeoutMs,
      maxSortKeys: values.searchMaxSortKeys,
      maxFilters: values.searchMaxParameters,
      maxHasDepth: values.searchMaxHasDepth,
      maxOffset: values.searchMaxOffset,
      maxAccurateTotal: values.searchMaxAccurateTotal,
      maxTerminologyCodes: values.searchMaxTerminologyCodes,
    }).toEqual({
      ...fhir.searchAdmission,
      timeoutMs: fhir.searchTimeoutMs,
      maxSortKeys: fhir.searchLimits.maxSortKeys,
      maxFilters: fhir.searchLimits.maxFilters,
      maxHasDepth: fhir.searchLimits.maxHasDepth,
      maxOffset: fhir.searchLimits.maxOffset,
      maxAccurateTotal: fhir.searchLimits.maxAccurateTotal,
      maxTerminologyCodes: fhir.searchLimits.maxTerminologyCodes,
    });
    expect(values.terminologyMaxExpansion).toBe(DEFAULT_MAX_EXPANSION_SIZE);
    expect(values.authorizeTicketLifetime).toBe(600);
    expect({
      maxOperations: values.fhirMaxPatchOperations,
      maxResourceSize: values.fhirMaxPatchedResourceSize,
    }).toEqual(fhir.patchLimits);
    const audit = resolveAuditOptions('test', {});
    expect({
      maxUrlLength: values.auditMaxUrlLength,
      refusalWindowMs: values.auditRefusalWindowMs,
      maxRefusalSources: values.auditMaxRefusalSources,
    }).toEqual({
      maxUrlLength: audit.maxUrlLength,
      refusalWindowMs: audit.refusalWindowMs,
      maxRefusalSources: audit.maxRefusalSources,
    });
  });
});

describe('serve settings: reading', () => {
  it('reads the bulk limits, in bytes with units or Infinity', () => {
    const config = readConfig({
      BULK_MAX_KICKOFFS_PER_HOUR: 'Infinity',
      BULK_MAX_RUNNING_EXPORTS: '4',
      BULK_EXPORT_THREADS: '3',
      BULK_MAX_PROJECT_EXPORT_SIZE: '512mb',
      BULK_MAX_EXPORT_SIZE: '1.5GB',
      BULK_MIN_FREE_SPACE: '0',
      BULK_MAX_TYPE_FILTER_MATCHES: '10',
    });
    expect(config).toMatchObject({
      bulkMaxKickoffsPerHour: Infinity,
      bulkMaxRunningExports: 4,
      bulkExportThreads: 3,
      bulkMaxProjectExportSize: 512 * 1024 * 1024,
      bulkMaxExportSize: 1.5 * 1024 * 1024 * 1024,
      bulkMinFreeSpace: 0,
      bulkMaxTypeFilterMatches: 10,
    });
    expect(readConfig({ BULK_MAX_TYPE_FILTER_MATCHES: 'Infinity' }).bulkMaxTypeFilterMatches).toBe(Infinity);
    expect(readConfig({ BULK_MAX_EXPORT_SIZE: '1048576' }).bulkMaxExportSize).toBe(1048576);
  });

  it('reads the bound on exact search totals, a positive integer or Infinity', () => {
    expect(readConfig({ SEARCH_MAX_ACCURATE_TOTAL: '5000' }).searchMaxAccurateTotal).toBe(5000);
    expect(readConfig({ SEARCH_MAX_ACCURATE_TOTAL: 'Infinity' }).searchMaxAccurateTotal).toBe(Infinity);
    for (const bad of ['0', '1.5', 'many'])
      expect(() => readConfig({ SEARCH_MAX_ACCURATE_TOTAL: bad }), bad).toThrow(/SEARCH_MAX_ACCURATE_TOTAL/);
  });

  it.each([
    ['BULK_MAX_KICKOFFS_PER_HOUR', '0'],
    ['BULK_MAX_KICKOFFS_PER_HOUR', '2.5'],
    ['BULK_MAX_RUNNING_EXPORTS', 'Infinity'],
    ['BULK_EXPORT_THREADS', '0'],
    // bytes.parse alone reads '1GiB' as 1 and '1e3' as 1.
    ['BULK_MAX_PROJECT_EXPORT_SIZE', '1GiB'],
    ['BULK_MAX_PROJECT_EXPORT_SIZE', '1e3'],
    ['BULK_MAX_EXPORT_SIZE', '0'],
    ['BULK_MIN_FREE_SPACE', 'Infinity'],
    ['BULK_MAX_TYPE_FILTER_MATCHES', '0'],
    ['BULK_MIN_FREE_SPACE', '-1'],
    ['SHUTDOWN_TIMEOUT_MS', 'soon'],
    ['LOG_LEVEL', 'verbose'],
    ['PORT', '65536'],
    ['BASE_URL', 'localhost:3006'],
    ['BASE_URL', 'ftp://fhir.example.org'],
    ['MAX_CONNECTIONS_PER_ADDRESS', '-3'],
  ])('refuses %s=%s with a usage error naming the variable and its flag', (name, value) => {
    expect(() => readConfig({ [name]: value })).toThrow(
      expect.objectContaining({ exitCode: 2, message: expect.stringContaining(name) }),
    );
    const flag = serveSettings()
      .find(([, s]) => s.env === name)![1]
      .flag.split(' ')[0]!;
    expect(() => readConfig({ [name]: value })).toThrow(flag);
  });

  it('reads the refresh token and authorization ticket lifetimes, in whole seconds', () => {
    expect(
      readConfig({
        REFRESH_TOKEN_LIFETIME: '86400',
        ONLINE_REFRESH_TOKEN_LIFETIME: '3600',
        AUTHORIZE_TICKET_LIFETIME: '120',
      }),
    ).toMatchObject({
      refreshTokenLifetime: 86400,
      onlineRefreshTokenLifetime: 3600,
      authorizeTicketLifetime: 120,
    });
    const flags = serveEnvironment(
      { refreshTokenLifetime: '60', authorizeTicketLifetime: '30' },
      { REFRESH_TOKEN_LIFETIME: '90' },
    );
    expect(readConfig(flags)).toMatchObject({ refreshTokenLifetime: 60, authorizeTicketLifetime: 30 });
    for (const env of [
      'REFRESH_TOKEN_LIFETIME',
      'ONLINE_REFRESH_TOKEN_LIFETIME',
      'AUTHORIZE_TICKET_LIFETIME',
    ])
      for (const bad of ['0', '1.5', '1h', 'Infinity'])
        expect(() => readConfig({ [env]: bad }), `${env}=${bad}`).toThrow(new RegExp(env));
  });

  it('reads the PostgreSQL pool settings, and refuses them without DATABASE_URL', () => {
    const config = readConfig({
      DATABASE_URL: 'postgres://db/fhir',
      DATABASE_MAX_CONNECTIONS: '20',
      DATABASE_ACQUIRE_TIMEOUT_MS: '0',
      DATABASE_LOCK_TIMEOUT_MS: '5000',
      DATABASE_STATEMENT_TIMEOUT_MS: '30000',
      DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS: '1000',
      DATABASE_CLOSE_TIMEOUT_MS: '2000',
    });
    expect(config).toMatchObject({
      databaseMaxConnections: 20,
      databaseAcquireTimeoutMs: 0,
      databaseLockTimeoutMs: 5000,
      databaseStatementTimeoutMs: 30000,
      databaseIdleInTransactionTimeoutMs: 1000,
      databaseCloseTimeoutMs: 2000,
    });
    expect(() => readConfig({ DATABASE_URL: 'postgres://db/fhir', DATABASE_MAX_CONNECTIONS: '1' })).toThrow(
      /DATABASE_MAX_CONNECTIONS/,
    );
    expect(() => readConfig({ DATABASE_LOCK_TIMEOUT_MS: '5000' })).toThrow(
      /DATABASE_LOCK_TIMEOUT_MS.*DATABASE_URL/,
    );
  });

  it("reads the search lane's sizes, leaving the library's defaults when unset, and checks them against the pool", () => {
    const base = { DATABASE_URL: 'postgres://db/fhir' };
    expect(readConfig(base).databaseSearchConnections).toBeUndefined();
    expect(readConfig(base).databaseMaxProjectSearchConnections).toBeUndefined();
    // The documented defaults are the library's for the default pool.
    const search = defaultSearchConnections(POSTGRES_POOL_DEFAULTS.maxConnections);
    expect(SERVE_SETTINGS.databaseSearchConnections.defaultText).toMatch(new RegExp(`^${search} `));
    expect(SERVE_SETTINGS.databaseMaxProjectSearchConnections.defaultText).toMatch(
      new RegExp(`^${defaultProjectSearchConnections(search)} `),
    );
    expect(
      readConfig({
        ...base,
        DATABASE_MAX_CONNECTIONS: '20',
        DATABASE_SEARCH_CONNECTIONS: '12',
        DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS: '4',
      }),
    ).toMatchObject({ databaseSearchConnections: 12, databaseMaxProjectSearchConnections: 4 });
    for (const bad of ['0', '1.5', 'many'])
      expect(() => readConfig({ ...base, DATABASE_SEARCH_CONNECTIONS: bad }), bad).toThrow(
        /DATABASE_SEARCH_CONNECTIONS/,
      );
    expect(() => readConfig({ ...base, DATABASE_SEARCH_CONNECTIONS: '10' })).toThrow(
      /DATABASE_SEARCH_CONNECTIONS.*less than DATABASE_MAX_CONNECTIONS/,
    );
    expect(() =>
      readConfig({ ...base, DATABASE_SEARCH_CONNECTIONS: '4', DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS: '5' }),
    ).toThrow(/DATABASE_MAX_PROJECT_SEARCH_CONNECTIONS.*at most DATABASE_SEARCH_CONNECTIONS/);
    expect(() => readConfig({ DATABASE_SEARCH_CONNECTIONS: '4' })).toThrow(
      /DATABASE_SEARCH_CONNECTIONS.*DATABASE_URL/,
    );
  });

  it('reads the read replicas and their freshness', () => {
    const base = { DATABASE_URL: 'postgres://db/fhir' };
    expect(readConfig(base)).toMatchObject({ databaseReplicaFreshness: 'instance' });
    expect(readConfig(base).databaseReadReplicas).toBeUndefined();
    expect(
      readConfig({
        ...base,
        DATABASE_READ_REPLICAS: 'postgres://r1/fhir,postgres://r2/fhir',
        DATABASE_REPLICA_FRESHNESS: 'PRIMARY',
      }),
    ).toMatchObject({
      databaseReadReplicas: ['postgres://r1/fhir', 'postgres://r2/fhir'],
      databaseReplicaFreshness: 'primary',
    });
    expect(() => readConfig({ ...base, DATABASE_READ_REPLICAS: 'postgres://r1/fhir,' })).toThrow(
      /DATABASE_READ_REPLICAS/,
    );
    expect(() => readConfig({ ...base, DATABASE_REPLICA_FRESHNESS: 'eventual' })).toThrow(
      /DATABASE_REPLICA_FRESHNESS/,
    );
    expect(() => readConfig({ DATABASE_READ_REPLICAS: 'postgres://r1/fhir' })).toThrow(
      /DATABASE_READ_REPLICAS.*DATABASE_URL/,
    );
  });

  it('reads DATABASE_URL and each read replica as a PostgreSQL connection string, refusing anything else (exit 2)', () => {
    for (const url of [
      'postgres://user:secret@db.example.org:5432/fhir',
      'postgresql://db/fhir?sslmode=verify-full',
      'POSTGRES://db/fhir',
      'postgres:///fhir?host=/var/run/postgresql',
      'postgres://user:secret@/fhir?host=/var/run/postgresql',
      'socket:/var/run/postgresql?db=fhir',
      'socket://user:secret@/var/run/postgresql?db=fhir',
      '/var/run/postgresql fhir',
    ]) {
      expect(readConfig({ DATABASE_URL: url }).databaseUrl, url).toBe(url);
      expect(
        readConfig({
          DATABASE_URL: 'postgres://db/fhir',
          DATABASE_READ_REPLICAS: `postgres://r1/fhir,${url}`,
        }).databaseReadReplicas,
        url,
      ).toEqual(['postgres://r1/fhir', url]);
    }
    // pg would read each of these (a bare word as the host `base`, mysql:// as a PostgreSQL server).
    for (const [url, which] of [
      ['notaurl', /is not a URL/],
      ['localhost:5432/fhir', /scheme localhost:/],
      ['mysql://user:secret@db/fhir', /scheme mysql:, not postgres:/],
      ['postgres:db/fhir', /does not start with postgres:\/\//],
      ['postgres://db:99999/fhir', /is not a valid URL/],
      ['socket:', /no path after socket:/],
      ['socket://db', /no path after socket:/],
    ] as const) {
      const refused = (): unknown => readConfig({ DATABASE_URL: url });
      expect(refused, url).toThrow(
        expect.objectContaining({
          exitCode: 2,
          message: expect.stringMatching(
            /^DATABASE_URL \(--database-url\) must be a PostgreSQL connection string/,
          ),
        }),
      );
      expect(refused, url).toThrow(which);
      expect(
        () =>
          readConfig({
            DATABASE_URL: 'postgres://db/fhir',
            DATABASE_READ_REPLICAS: `postgres://r1/fhir,${url}`,
          }),
        url,
      ).toThrow(/^DATABASE_READ_REPLICAS \(--database-read-replicas\) must be .*, which has an entry that/);
    }
    // A password is not repeated in the message.
    expect(() => readConfig({ DATABASE_URL: 'mysql://user:secret@db/fhir' })).toThrow(
      /"mysql:\/\/user:\*\*\*@db\/fhir"/,
    );
    expect(() => readConfig({ DATABASE_URL: 'mysql://user:secret@db/fhir' })).not.toThrow(/secret/);
    expect(() =>
      readConfig({
        DATABASE_URL: 'postgres://db/fhir',
        DATABASE_READ_REPLICAS: 'mysql://user:secret@r1/fhir',
      }),
    ).not.toThrow(/secret/);
  });

  it('says once what BASE_URL must be, then what is wrong with the value given', () => {
    for (const [url, which] of [
      ['not a url', /which is not an absolute URL$/],
      ['localhost:3006', /which has the scheme "localhost:"$/],
      ['http:fhir.example.org', /which has no host after http:\/\/ or https:\/\/$/],
      ['https://user:pass@fhir.example.org', /which carries credentials$/],
      ['https://fhir.example.org/?x=1', /which has a query or fragment$/],
    ] as const) {
      let message = '';
      try {
        readConfig({ BASE_URL: url });
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message, url).toMatch(/^BASE_URL \(--base-url\) must be an absolute http or https URL/);
      expect(message.split('absolute http or https URL'), message).toHaveLength(2);
      expect(message).toMatch(which);
    }
  });

  it("refuses a BASE_URL that is the FHIR base (ending with /fhir/R4), naming the origin to set; keeps a proxy's prefix", () => {
    for (const url of ['http://localhost:8107/fhir/R4', 'http://localhost:8107/fhir/R4/']) {
      expect(() => readConfig({ BASE_URL: url }), url).toThrow(
        expect.objectContaining({
          exitCode: 2,
          message: expect.stringMatching(
            /^BASE_URL \(--base-url\) must be the server's origin.*not the FHIR base.*Set BASE_URL=http:\/\/localhost:8107 for the FHIR base http:\/\/localhost:8107\/fhir\/R4$/,
          ),
        }),
      );
    }
    expect(() => readConfig({ BASE_URL: 'https://host.example.org/api/fhir/R4' })).toThrow(
      /Set BASE_URL=https:\/\/host\.example\.org\/api for/,
    );
    expect(readConfig({ BASE_URL: 'https://host.example.org/api/' }).baseUrl).toBe(
      'https://host.example.org/api',
    );
    expect(readConfig({ BASE_URL: 'https://host.example.org/fhir' }).baseUrl).toBe(
      'https://host.example.org/fhir',
    );
  });

  it('lays flags over the variables', () => {
    const env = serveEnvironment(
      { bulkMaxKickoffsPerHour: '5', logLevel: 'warn', bulkRequireAsyncHeaders: true },
      { BULK_MAX_KICKOFFS_PER_HOUR: '7', LOG_LEVEL: 'debug' },
    );
    expect(readConfig(env)).toMatchObject({
      bulkMaxKickoffsPerHour: 5,
      logLevel: 'warn',
      bulkRequireAsyncHeaders: true,
    });
  });
});

describe('the serve settings table of docs/settings.md', () => {
  it.each(SERVE_DOCS_PAGES.map((page) => [path.relative(REPO, page.file), page] as const))(
    '%s lists every setting as SERVE_SETTINGS has it (regenerate with npm run docs:serve)',
    (_name, { file, linksFrom }) => {
      expect(serveTableCellsIn(fs.readFileSync(file, 'utf8'))).toEqual(serveTableCells(linksFrom));
    },
  );

  it('is on one page, which the README and docs/getting-started.md link to instead of a copy', () => {
    expect(SERVE_DOCS_PAGES.map((page) => path.relative(REPO, page.file))).toEqual([
      path.join('docs', 'settings.md'),
    ]);
    const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
    const gettingStarted = fs.readFileSync(path.join(REPO, 'docs', 'getting-started.md'), 'utf8');
    expect(serveTableCellsIn(readme)).toBeUndefined();
    expect(serveTableCellsIn(gettingStarted)).toBeUndefined();
    expect(readme).toContain('](docs/settings.md)');
    expect(gettingStarted).toContain('](settings.md)');
  });
});
