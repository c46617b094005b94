import { describe, expect, it } from 'vitest';
import * as root from '../src/index.js';
import * as postgres from '../src/postgres.js';
import * as testing from '../src/testing/index.js';

// The runtime names of each package entry, pinned: adding, renaming or removing an export fails
// here, so a change to the public surface is a deliberate one (update the list and the docs
// together). Type-only exports are erased at runtime and are not pinned here.

const ROOT = [
  'CLIENT_AUTH_METHODS',
  'ConflictError',
  'DEFAULT_SCOPES_SUPPORTED',
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
  'bearerAuth',
  'buildAuditEvent',
  'bulkExportCapability',
  'bulkExportRouter',
  'compareSortValues',
  'createAuditTrail',
  'ensureSuperAdminClient',
  'fallbackErrorHandler',
  'fhirErrorHandler',
  'fhirPlatform',
  'fhirRouter',
  'fileStorage',
  'jwksHandler',
  'memoryStorage',
  'notFoundHandler',
  'oauthErrorHandler',
  'openFileExportReader',
  'platformAdmin',
  'projectRouter',
  'protectServer',
  'provisionSuperAdminClient',
  'r4StructureValidator',
  'rotateSuperAdminSecret',
  'scimErrorHandler',
  'scimRouter',
  'signingKeys',
  'smartConfigurationHandler',
  'smartSecurity',
  'splitScopes',
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
