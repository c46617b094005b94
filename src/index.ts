/**
 * The package root: the routers and `fhirPlatform`, the file and memory stores, their option and
 * record types, and the errors.
 * @packageDocumentation
 * @module fhir-platform-kit
 */

// The public API: the factories, the storage adapters, their option and record types, and the
// errors. Every exported name is listed here explicitly (no `export *`); plumbing (renderers, token
// and assertion internals, parsers) stays inside. The storage contract suite is the
// `fhir-platform-kit/testing` subpath (src/testing/index.ts).

// Errors: one root class, one code union (docs/errors.md), the protocol error classes a host's
// own `authenticate` or validator may throw, and the protocol error handlers for a host's own routes.
export { PlatformError, InvalidOptionError } from './errors.js';
export type { ErrorCode, StorageErrorCode, FhirErrorCode, ScimErrorCode, OAuthErrorCode } from './errors.js';
export { HttpError, ScimError, FhirError, OAuthError } from './http/http-error.js';
export type { FhirIssueCode, ScimType, OAuthErrorType } from './http/http-error.js';
export { FhirOutcomeError } from './http/outcome.js';
export {
  fhirErrorHandler,
  scimErrorHandler,
  oauthErrorHandler,
  // The last error handler of a host app: each error in the protocol of its path.
  fallbackErrorHandler,
  // What an error thrown by `platform.admin` (or anything else) is answered as over FHIR.
  toOperationOutcome,
} from './http/error-rendering.js';
export type { ErrorLogger, FallbackErrorHandlerOptions } from './http/error-rendering.js';

// Host helpers: server timeouts and a JSON 404, which paths answer SCIM or OAuth errors, the
// logger shape, the router options shape
export { protectServer, notFoundHandler } from './http/server-limits.js';
export type { ServerLimits, NotFoundHandlerOptions } from './http/server-limits.js';
export type { ErrorPaths } from './http/error-paths.js';
export type { Logger, LoggedError } from './common/logger.js';
export { unauthorized } from './http/authenticate.js';
export type { CommonRouterOptions } from './http/router-options.js';

// Auth: the token endpoint, the token verifier, signing keys, discovery, the super-admin client
export type { Principal, Authenticate } from './http/principal.js';
export type { PerRequest } from './auth/token/issuer.js';
export { tokenRouter } from './auth/token/token-router.js';
export type { TokenRouterOptions } from './auth/token/token-router.js';
export { authorizationRouter } from './auth/authorize/authorization-router.js';
export type { AuthorizationRouterOptions } from './auth/authorize/authorization-router.js';
export { DEFAULT_AUTHORIZATION_PAGES } from './auth/browser/authorization-pages.js';
export type {
  AuthorizationErrorPage,
  AuthorizationForm,
  AuthorizationPages,
  ConsentPage,
  PatientPickerPage,
  PickerPatient,
} from './auth/browser/authorization-pages.js';
export type { AuthenticateUser, SignInRequest, SignedInUser } from './auth/authorize/user-sign-in.js';
export { introspectionRouter, revocationRouter } from './auth/token/revocation-router.js';
export type { TokenManagementOptions } from './auth/token/revocation-router.js';
export { bearerAuth } from './auth/access/bearer-auth.js';
export type { BearerAuthOptions } from './auth/access/bearer-auth.js';
export { signingKeys, SIGNING_ALGORITHMS } from './auth/keys/signing-keys.js';
export { federatedSignIn } from './auth/federation/federated-sign-in.js';
export type { FederatedSignIn, FederatedSignInOptions } from './auth/federation/federated-sign-in.js';
export type { IdentityProviderJwksOptions } from './auth/federation/identity-provider-keys.js';
export { DEFAULT_SIGN_IN_TEXTS } from './auth/browser/sign-in-pages.js';
export type { SignInRefusal, SignInRefusalReason } from './auth/browser/sign-in-pages.js';
export type {
  SigningKeys,
  SigningKeysOptions,
  SigningAlgorithm,
  ActiveSigningKey,
  VerificationKey,
} from './auth/keys/signing-keys.js';
export { CLIENT_AUTH_METHODS } from './auth/client/client-authentication.js';
export type { ClientAuthMethod } from './auth/client/client-authentication.js';
export type { ClientJwksOptions } from './auth/client/client-jwks.js';
export type { FailureLimitOptions } from './auth/client/failure-limiter.js';
export {
  ensureSuperAdminClient,
  provisionSuperAdminClient,
  rotateSuperAdminSecret,
} from './auth/client/super-admin.js';
export type { SuperAdminCredentials } from './auth/client/super-admin.js';
export {
  smartConfigurationHandler,
  openidConfigurationHandler,
  smartSecurity,
  DEFAULT_SCOPES_SUPPORTED,
} from './auth/discovery/smart-configuration.js';
export type {
  SmartConfigurationOptions,
  SmartSecurityEndpoints,
} from './auth/discovery/smart-configuration.js';
export { jwksHandler } from './auth/keys/jwks-handler.js';
export type { JwksHandlerOptions } from './auth/keys/jwks-handler.js';
export { splitScopes } from './auth/access/scopes.js';
export { PROJECT_ADMIN_SCOPE, PLATFORM_ADMIN_SCOPE } from './auth/access/admin-scopes.js';

// Storage
export {
  StorageError,
  NotFoundError,
  ConflictError,
  PreconditionFailedError,
  StorageClosedError,
  StorageLockedError,
  StorageUnavailableError,
  SearchTooCostlyError,
  UnsupportedSearchError,
} from './storage/errors.js';
export { compareSortValues } from './storage/result-page.js';
export {
  compartmentSearch,
  findUnresolvedTerminology,
  identifierFilter,
  idFilter,
  lastUpdatedFilters,
  reachedSearch,
  reachOf,
  typeSearch,
  unresolvedTerminology,
} from './storage/search-request.js';
export type * from './storage/search-request.js';
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
  ProjectIdentityProvider,
  ProjectGroupRole,
  ProjectImportSource,
  UserMatchAttribute,
  UserRecord,
  NewUser,
  ProjectChanges,
  UserChanges,
  UserQuery,
  UserFilter,
  UserSortKey,
  UserCursor,
  UserListOptions,
  UserPage,
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
  ResourceOrder,
  ResourceCursor,
  SortValue,
  ResourcePage,
  WriteOptions,
  ResourceWrite,
  WriteResult,
  StoredText,
  Tombstone,
  ExportSnapshot,
  ExportReadOptions,
  NdjsonChunk,
  ExportReader,
} from './storage/types.js';

// FHIR data plane: router, CapabilityStatement contributions, the strict-mode validator
export { fhirRouter } from './fhir/router.js';
export type { FhirRouterOptions, FhirSearchLimits } from './fhir/router-options.js';
export type { SearchAdmissionLimits } from './fhir/search/search-admission.js';
export type { SearchCostLimits } from './search/cost-limits.js';
export type {
  CapabilityContribution,
  CapabilityOperation,
  CapabilityStatementInput,
  CapabilityStatementJson,
} from './fhir/capability/capability-statement.js';
export type { CapabilitySearchLimits } from './fhir/capability/capability-limits.js';
export { R4_PATIENT_COMPARTMENT } from './fhir/compartment.js';

// Terminology: the service of $expand, $lookup, $validate-code, $subsumes, bindings and :in/:below
export { r4Terminology, type R4TerminologyOptions } from './terminology/r4-terminology.js';
export { storageTerminologySource } from './terminology/storage-source.js';
export { TerminologyError } from './terminology/terminology-types.js';
export type {
  CodeValidation,
  ExpandOptions,
  Expansion,
  Membership,
  Subsumption,
  SystemCode,
  Terminology,
  TerminologySource,
  ValidateCodeRequest,
} from './terminology/terminology-types.js';
export { r4StructureValidator } from './fhir/validation/structure-validator.js';
export type { ResourceValidator } from './fhir/validation/structure-validator.js';
export type { NdjsonUploadOptions } from './fhir/upload/ndjson-upload.js';
export type { OperationOutcome, OutcomeIssue } from './http/outcome.js';

// Projects: Project/$init, client registration
export { projectRouter } from './project/router.js';
export type { ProjectRouterOptions } from './project/router.js';
export type { ProjectResource } from './project/project-resource.js';
export type {
  IdentityProviderView,
  IdentityProviderClientAuth,
} from './project/identity-provider-settings.js';
export type { GroupRoleView } from './project/group-role-settings.js';
export type { ImportSourceView } from './project/import-source-settings.js';
export type { ClientApplicationResource } from './project/client-application.js';

// Bulk Data export 2.0.0: router, worker pool, CapabilityStatement helper
export { bulkExportRouter } from './bulk/router.js';
export type { BulkExportRouter, BulkExportRouterOptions } from './bulk/router.js';
export type { BulkImportOptions } from './bulk/import/import-options.js';
export { ExportPool } from './bulk/export-pool.js';
export type { ExportPoolOptions, ExportRunOptions } from './bulk/export-pool.js';
export type {
  ExportTask,
  ExportTaskResult,
  ExportProgress,
  ExportOutputFile,
  CommittedFile,
} from './bulk/export-task.js';
export type { ExportParams, ExportLevel, KickoffIssue, AssociatedData } from './bulk/kickoff-params.js';
export type { ExportManifest, ManifestEntry } from './bulk/manifest.js';
export { bulkExportCapability } from './bulk/capability.js';

// Composition: every router at the default paths
export { fhirPlatform } from './platform.js';
export type { FhirPlatform, FhirPlatformOptions, FhirPlatformPaths } from './platform.js';
export { platformAdmin } from './platform-admin.js';
export type { PlatformAdmin, ParametersResource } from './platform-admin.js';

// Storage adapters (memory, file), with the FHIR R4 patient compartment by default.
// `openFileExportReader` is what export workers import (by name, from this module) to reopen a
// file store: it must stay exported here.
export { InvalidRecordError } from './storage/errors.js';
export type {
  ExportSnapshotOptions,
  FailureCount,
  FailureCountStore,
  GrantFilter,
  GrantKind,
  GrantRecord,
  GrantStore,
  PatientCompartment,
  ExportFileStore,
  ExportFileSink,
  ExportFileHandle,
  ExportFileRange,
  ExportFilesRef,
  ExportJobQueue,
  HistoryEntry,
  HistoryMethod,
  HistoryPage,
  HistoryQuery,
  HistoryRetention,
} from './storage/types.js';
export { DirectoryExportFiles } from './bulk/directory-export-files.js';
export { memoryStorage, fileStorage, openFileExportReader, r4SearchIndexer } from './stores.js';
export type {
  DerivedParameter,
  FilterResolver,
  FilterTest,
  IndexerOption,
  ResourceIndexer,
  ResourceIndexEntries,
} from './storage/search-index.js';
export type * from './storage/index-values.js';
export type { MemoryStorageOptions } from './storage/memory.js';
export type { FileStorageOptions, FileStore, FileStoreBackup } from './storage/file/file-storage.js';
export type { FileExportReaderOptions } from './storage/file/export-reader.js';

// Storage adapter: PostgreSQL is the subpath `fhir-platform-kit/postgres` (src/postgres.ts), so
// that hosts on the other stores never load `pg`.

// SCIM 2.0 Users (RFC 7643/7644)
export { scimRouter } from './scim/router.js';
export type { ScimRouterOptions } from './scim/router.js';

// Audit trail (FHIR R4 AuditEvent): the event model, the builder, the durable batched trail
export { createAuditTrail, PLATFORM_AUDIT_PROJECT_ID } from './audit/trail.js';
export type { AuditTrail, AuditTrailOptions } from './audit/trail.js';
export type { AuditOptions, AuditContext } from './audit/options.js';
export { buildAuditEvent } from './audit/build-event.js';
export type { Coding, AuditAction, AuditOutcomeCode } from './audit/codes.js';
export type { BuildAuditEventOptions } from './audit/build-event.js';
export type {
  AuditEventResource,
  AuditEventAgent,
  AuditEventEntity,
  AuditReference,
} from './audit/audit-event-resource.js';
export type {
  AuditRecord,
  AuditKind,
  AuditActor,
  AuditBase,
  TokenEvent,
  ScimUserEvent,
  ProjectInitEvent,
  ClientEvent,
  FhirWriteEvent,
  FhirAccessEvent,
  ExportEvent,
  ImportEvent,
  DownloadEvent,
  RefusedEvent,
  SignInEvent,
  AuthorizationEvent,
  RoleCapping,
  RepeatedRefusals,
} from './audit/events.js';
