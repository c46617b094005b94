// The public API. Every exported name is listed here explicitly (no `export *`).

// HTTP glue
export { HttpError, ScimError, FhirError, OAuthError } from './http/http-error.js';
export {
  toHttpError,
  operationOutcome,
  fhirErrorHandler,
  scimErrorHandler,
  oauthErrorHandler,
  defaultErrorLogger,
} from './http/error-rendering.js';
export type { ErrorLogger } from './http/error-rendering.js';
export { asyncHandler } from './http/async-handler.js';
export { absoluteUrl, requestUrl } from './http/base-url.js';
export { requirePrincipal, getPrincipal, unauthorized } from './http/authenticate.js';
export type { CommonRouterOptions } from './http/router-options.js';

// Auth
export type { Principal, Authenticate } from './auth/principal.js';

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
