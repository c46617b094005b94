import fs from 'node:fs';
import { describe, expect, expectTypeOf, it } from 'vitest';
import type {
  BulkExportRouterOptions,
  ExportPoolOptions,
  ExportTask,
  FhirPlatformOptions,
} from '../src/index.js';
import * as root from '../src/index.js';
import * as postgres from '../src/postgres.js';
import * as testing from '../src/testing/index.js';

// The runtime names of each package entry, pinned: adding, renaming or removing an export fails
// here, so a change to the public surface is a deliberate one (update the list and the docs
// together). Type-only exports are erased at runtime and are not pinned here.

const ROOT = [
  'CLIENT_AUTH_METHODS',
  'ConflictError',
  'DEFAULT_AUTHORIZATION_PAGES',
  'DEFAULT_SCOPES_SUPPORTED',
  'DEFAULT_SIGN_IN_TEXTS',
  'DirectoryExportFiles',
  'ExportPool',
  'FhirError',
  'FhirOutcomeError',
  'HttpError',
  'InvalidOptionError',
  'InvalidRecordError',
  'NotFoundError',
  'OAuthError',
  'PLATFORM_ADMIN_SCOPE',
  'PLATFORM_AUDIT_PROJECT_ID',
  'PROJECT_ADMIN_SCOPE',
  'PlatformError',
  'PreconditionFailedError',
  'R4_PATIENT_COMPARTMENT',
  'SIGNING_ALGORITHMS',
  'ScimError',
  'StorageClosedError',
  'StorageError',
  'StorageLockedError',
  'StorageUnavailableError',
  'SearchTooCostlyError',
  'TerminologyError',
  'authorizationRouter',
  'bearerAuth',
  'buildAuditEvent',
  'bulkExportCapability',
  'bulkExportRouter',
  'compareSortValues',
  'compartmentSearch',
  'idFilter',
  'identifierFilter',
  'lastUpdatedFilters',
  'typeSearch',
  'reachOf',
  'reachedSearch',
  'createAuditTrail',
  'ensureSuperAdminClient',
  'fallbackErrorHandler',
  'fhirErrorHandler',
  'federatedSignIn',
  'fhirPlatform',
  'fhirRouter',
  'fileStorage',
  'introspectionRouter',
  'jwksHandler',
  'memoryStorage',
  'notFoundHandler',
  'oauthErrorHandler',
  'openFileExportReader',
  'openidConfigurationHandler',
  'platformAdmin',
  'projectRouter',
  'protectServer',
  'provisionSuperAdminClient',
  'r4SearchIndexer',
  'r4StructureValidator',
  'r4Terminology',
  'revocationRouter',
  'rotateSuperAdminSecret',
  'scimErrorHandler',
  'scimRouter',
  'signingKeys',
  'smartConfigurationHandler',
  'smartSecurity',
  'splitScopes',
  'storageTerminologySource',
  'toOperationOutcome',
  'tokenRouter',
  'unauthorized',
];

const POSTGRES = ['openPostgresExportFiles', 'openPostgresExportReader', 'postgresStorage'];

const TESTING = ['collectNdjson', 'runStorageContract'];

const names = (entry: object): string[] => Object.keys(entry).sort();

describe('public surface', () => {
  it.each([
    ['fhir-platform-kit (src/index.ts)', root, ROOT],
    ['fhir-platform-kit/postgres (src/postgres.ts)', postgres, POSTGRES],
    ['fhir-platform-kit/testing (src/testing/index.ts)', testing, TESTING],
  ])('%s exports exactly the listed names', (_entry, entry, expected) => {
    expect(names(entry)).toEqual([...expected].sort());
  });
});

// Test seams stay off the public surface (as the file store's `FaultHook`, an internal argument):
// the export's former test hooks, one of which could make a worker call `process.exit(1)`, must not
// come back as options or task fields. Tests reach faults through their own fixtures instead (a
// store descriptor, a fault file, a pool subclass: see test/helpers/slow-exports.ts).
const TEST_HOOKS = ['taskHook', 'delayPerChunk', 'crash'] as const;

describe('no test hook on the public surface', () => {
  it('the options and the export task have none (checked by the type checker)', () => {
    expectTypeOf<BulkExportRouterOptions>().not.toHaveProperty('taskHook');
    expectTypeOf<NonNullable<Exclude<FhirPlatformOptions['bulk'], false>>>().not.toHaveProperty('taskHook');
    expectTypeOf<ExportPoolOptions>().not.toHaveProperty('taskHook');
    expectTypeOf<ExportTask>().not.toHaveProperty('delayPerChunk');
    expectTypeOf<ExportTask>().not.toHaveProperty('crash');
  });

  it('the built declarations (dist/*.d.ts, *.d.cts) name none', () => {
    const dist = new URL('../dist/', import.meta.url);
    const declarations = fs.existsSync(dist)
      ? fs.readdirSync(dist).filter((f) => f.endsWith('.d.ts') || f.endsWith('.d.cts'))
      : [];
    if (declarations.length === 0)
      throw new Error('dist/ has no declarations: run `npm run build` first (`npm test` builds it)');
    for (const file of declarations) {
      const text = fs.readFileSync(new URL(file, dist), 'utf8');
      for (const name of TEST_HOOKS)
        expect(text, `${file} declares ${name}`).not.toMatch(new RegExp(`\\b${name}\\??:`));
    }
  });

  it('bulkExportRouter refuses taskHook as an unknown option', () => {
    const options = {
      storage: root.memoryStorage(),
      authenticate: () => undefined,
      taskHook: (task: unknown) => task,
    };
    expect(() => root.bulkExportRouter(options as unknown as BulkExportRouterOptions)).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });
});
