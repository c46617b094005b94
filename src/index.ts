// The public API. Every exported name is listed here explicitly (no `export *`).

// Errors: one root class, one code union, one table of answers (docs/errors.md)
export { PlatformError, InvalidOptionError } from './errors.js';
export type { ErrorCode, StorageErrorCode, FhirErrorCode, ScimErrorCode, OAuthErrorCode } from './errors.js';
export { HttpError, ScimError, FhirError, OAuthError } from './http/http-error.js';
export type { FhirIssueCode, ScimType, OAuthErrorType } from './http/http-error.js';
export { FhirOutcomeError } from './fhir/outcome.js';
export { ERROR_TABLE } from './http/error-table.js';
export type { ErrorAnswer } from './http/error-table.js';
export {
  toHttpError,
  toOperationOutcome,
  toScimErrorResponse,
  toOAuthErrorResponse,
  operationOutcome,
  fhirErrorHandler,
  scimErrorHandler,
  oauthErrorHandler,
  defaultErrorLogger,
} from './http/error-rendering.js';
export type { ErrorLogger, ErrorResponse, ScimErrorBody, OAuthErrorBody } from './http/error-rendering.js';

// HTTP glue
export { asyncHandler } from './http/async-handler.js';
export { protectServer, notFoundHandler } from './http/server-limits.js';
export type { ServerLimits } from './http/server-limits.js';
export { absoluteUrl, requestUrl } from './http/base-url.js';
export { DEFAULT_MAX_JSON_DEPTH } from './http/json-depth.js';
export { requirePrincipal, getPrincipal, unauthorized } from './http/authenticate.js';
export type { CommonRouterOptions } from './http/router-options.js';

// Auth
export type { Principal, Authenticate } from './auth/principal.js';
export { tokenRouter, resolveTokenEndpointConfig } from './auth/token-router.js';
export type { TokenRouterOptions } from './auth/token-router.js';
export { handleTokenRequest } from './auth/token-endpoint.js';
export type { TokenRequest, TokenResponse, TokenEndpointConfig } from './auth/token-endpoint.js';
export { bearerAuth } from './auth/bearer-auth.js';
export type { BearerAuthOptions } from './auth/bearer-auth.js';
export { signingKeys, SIGNING_ALGORITHMS } from './auth/signing-keys.js';
export type {
  SigningKeys,
  SigningKeysOptions,
  SigningAlgorithm,
  ActiveSigningKey,
  VerificationKey,
} from './auth/signing-keys.js';
export {
  issueAccessToken,
  verifyAccessToken,
  AccessTokenError,
  ACCESS_TOKEN_TYPE,
} from './auth/access-token.js';
export type {
  AccessTokenClaims,
  IssueAccessTokenInput,
  VerifyAccessTokenOptions,
} from './auth/access-token.js';
export {
  verifyClientAssertion,
  ClientAssertionError,
  CLIENT_ASSERTION_ALGORITHMS,
  JWT_BEARER_ASSERTION_TYPE,
} from './auth/client-assertion.js';
export type { ClientAssertionFailure, VerifyClientAssertionOptions } from './auth/client-assertion.js';
export { CLIENT_AUTH_METHODS } from './auth/client-authentication.js';
export type { ClientAuthMethod } from './auth/client-authentication.js';
export { clientJwks, isFetchableJwksUri } from './auth/client-jwks.js';
export type { ClientJwks, ClientJwksOptions } from './auth/client-jwks.js';
export { FailureLimitError } from './auth/failure-limiter.js';
export type {
  FailureLimitOptions,
  FailureLimiter,
  FailureLimitAttempt,
  FailureLimitReason,
} from './auth/failure-limiter.js';
export { GateFullError } from './auth/concurrency-gate.js';
export { generateClientSecret, hashClientSecret, verifyClientSecret } from './auth/client-secret.js';
export { ensureSuperAdminClient, provisionSuperAdminClient } from './auth/super-admin.js';
export type { SuperAdminCredentials } from './auth/super-admin.js';
export {
  smartConfiguration,
  smartConfigurationHandler,
  smartSecurity,
  DEFAULT_SCOPES_SUPPORTED,
} from './auth/smart-configuration.js';
export type { SmartConfigurationOptions } from './auth/smart-configuration.js';
export { jwksHandler } from './auth/jwks-handler.js';
export type { JwksHandlerOptions } from './auth/jwks-handler.js';
export { parseResourceScope, splitScopes, scopesAllow, intersectScopes } from './auth/scopes.js';
export type { ResourceScope, ScopeAction } from './auth/scopes.js';
export { canAccess } from './auth/access.js';
export { allowedScopes } from './auth/client-scopes.js';
export { PROJECT_ADMIN_SCOPE, PLATFORM_ADMIN_SCOPE, adminRights } from './auth/admin-scopes.js';
export type { ResourceAction } from './auth/access.js';

// Storage
export {
  StorageError,
  NotFoundError,
  ConflictError,
  PreconditionFailedError,
  StorageClosedError,
  StorageLockedError,
} from './storage/errors.js';
export type {
  Storage,
  StorageOperations,
  StorageDescriptor,
  FhirResource,
  FhirMeta,
  StoredResource,
  ProjectRecord,
  ProfileType,
  ProjectScimSettings,
  UserRecord,
  NewUser,
  UserChanges,
  UserQuery,
  MembershipRecord,
  NewMembership,
  ClientRecord,
  NewClient,
  ClientChanges,
  SigningKeyRecord,
  ExportJobStatus,
  ExportJobRecord,
  NewExportJob,
  ExportJobChanges,
  InstantRange,
  IdentifierToken,
  ResourceQuery,
  ResourcePage,
  WriteOptions,
  ResourceWrite,
  WriteResult,
  Tombstone,
  ExportSnapshot,
  ExportReadOptions,
  NdjsonChunk,
  ExportReader,
} from './storage/types.js';

// FHIR data plane: router, CapabilityStatement, search, compartment, resource types
export { fhirRouter } from './fhir/router.js';
export type { FhirRouterOptions } from './fhir/router-options.js';
export { buildCapabilityStatement } from './fhir/capability-statement.js';
export type {
  CapabilityContribution,
  CapabilityOperation,
  CapabilityStatementInput,
  CapabilityStatementJson,
} from './fhir/capability-statement.js';
export { parseSearchParams } from './fhir/search.js';
export type { ParseSearchOptions, ParsedSearch } from './fhir/search.js';
export {
  patientCompartmentIds,
  patientCompartmentTypes,
  compartmentParams,
  patientSearchParams,
  R4_PATIENT_COMPARTMENT,
} from './fhir/compartment.js';
export { isResourceType, isValidId, R4_RESOURCE_TYPES } from './fhir/resource-types.js';
export { r4StructureValidator } from './fhir/structure-validator.js';
export type { ResourceValidator } from './fhir/structure-validator.js';
export type { NdjsonUploadOptions } from './fhir/ndjson-upload.js';
export type { OperationOutcome, OutcomeIssue } from './fhir/outcome.js';

// Projects: Project/$init, client registration, FHIR Parameters reader
export { projectRouter } from './project/router.js';
export type { ProjectRouterOptions } from './project/router.js';
export type { ProjectResource } from './project/project-resource.js';
export type { ClientApplicationResource } from './project/client-application.js';
export { readParameters, invalidParameter } from './project/parameters.js';
export type {
  ParameterValueType,
  ParameterDefinition,
  ParameterDefinitions,
  ParameterJsType,
  ParameterValue,
  ReadParameters,
} from './project/parameters.js';

// Bulk Data export 2.0.0: router, worker pool, CapabilityStatement helper
export { bulkExportRouter } from './bulk/router.js';
export type { BulkExportRouter, BulkExportRouterOptions } from './bulk/router.js';
export { ExportPool } from './bulk/export-pool.js';
export { ExportTooLargeError } from './bulk/byte-budget.js';
export type { ExportPoolOptions, ExportRunOptions } from './bulk/export-pool.js';
export type { ExportTask, ExportTaskResult, ExportProgress, ExportOutputFile } from './bulk/export-task.js';
export type { ExportParams, ExportLevel, KickoffIssue } from './bulk/kickoff-params.js';
export type { ExportManifest, ManifestEntry } from './bulk/manifest.js';
export {
  bulkExportCapability,
  withBulkExportCapability,
  bulkExportOperations,
  BULK_DATA_CAPABILITY_STATEMENT,
} from './bulk/capability.js';

// Composition: every router at the default paths
export { fhirPlatform } from './platform.js';
export type { FhirPlatform, FhirPlatformOptions } from './platform.js';
export { platformAdmin } from './platform-admin.js';
export type { PlatformAdmin, ParametersResource } from './platform-admin.js';

// Storage adapters (memory, file), with the FHIR R4 patient compartment by default
export { InvalidRecordError } from './storage/errors.js';
export type { ExportSnapshotOptions, PatientCompartment } from './storage/types.js';
export { memoryStorage, fileStorage, openFileExportReader, postgresStorage } from './stores.js';
export type { MemoryStorageOptions } from './storage/memory.js';
export type { FileStorageOptions } from './storage/file/file-storage.js';
export type { FileExportReaderOptions } from './storage/file/export-reader.js';

// Storage adapter: PostgreSQL
export type { PostgresStorageOptions } from './storage/postgres/postgres-storage.js';
export { openPostgresExportReader } from './storage/postgres/export-reader.js';
export type { PostgresExportReaderOptions } from './storage/postgres/export-reader.js';

// SCIM 2.0 Users (RFC 7643/7644): router, filter parser/evaluator, PATCH engine, schemas
export { scimRouter } from './scim/router.js';
export type { ScimRouterOptions } from './scim/router.js';
export { parseScimFilter, parseScimPath, printScimFilter } from './scim/filter-parser.js';
export type {
  ScimFilter,
  ScimAttributePath,
  ScimCompareOperator,
  ScimFilterValue,
  ScimPatchPath,
  ScimFilterParseOptions,
} from './scim/filter-parser.js';
export { compileScimFilter, matchesScimFilter } from './scim/filter-evaluator.js';
export type { ScimFilterPredicate } from './scim/filter-evaluator.js';
export { applyScimPatch } from './scim/patch.js';
export type { ScimPatchOperation, ScimPatchRequest, ApplyScimPatchOptions } from './scim/patch.js';
export { projectScimAttributes } from './scim/attributes.js';
export type { ScimAttributeSelection } from './scim/attributes.js';
export { USER_RESOURCE_SCHEMAS, CORE_USER_SCHEMA_ID, ENTERPRISE_USER_SCHEMA_ID } from './scim/schema.js';
export type { ScimAttributeDefinition, ScimSchemaDefinition, ScimResourceSchemas } from './scim/schema.js';
