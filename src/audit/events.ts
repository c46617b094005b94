/**
 * What happened, before it becomes an R4 `AuditEvent`: one small typed description per kind of
 * event. Routers and services describe an action with one of these and hand it to
 * `AuditTrail.record`; `buildAuditEvent` (./build-event.ts) turns it into the resource. Plain
 * data only, no Express and no storage.
 */

/** Who acted: the principal of the request, or a caller the server could not identify. */
export interface AuditActor {
  /** `client`, `user` or `super-admin` for an authenticated principal; `anonymous` otherwise. */
  kind: 'client' | 'user' | 'super-admin' | 'anonymous';
  /** Client id or user id; for `anonymous`, the client id the caller claimed, when it named one. */
  id?: string;
  /** A user's FHIR profile (`Practitioner/123`), when known. */
  profile?: string;
  /** A human-readable name (the client's name). Never a secret. */
  name?: string;
}

/** What every event carries. */
export interface AuditBase {
  /** The project the event belongs to; `null` for platform-level events (super admin, no project). */
  projectId: string | null;
  actor: AuditActor;
  /** The caller's network address (the request's `req.ip`). */
  address?: string;
  /** When it happened. @default now */
  recorded?: Date;
}

/**
 * Refusals of one source counted into one event, instead of one event each (the trail's
 * `refusalWindowMs`, docs/audit.md "Floods of refusals"). The event describes the first of them.
 */
export interface RepeatedRefusals {
  /** How many refusals the event stands for, the one it describes included. */
  count: number;
  /** When the first of them came (`period.start`). */
  first: Date;
  /** When the last of them came (`period.end`). */
  last: Date;
  /**
   * They came from sources over the trail's `maxRefusalSources` (many addresses, projects or
   * clients): counted together, in the platform log, with no address and no client.
   */
  overflow?: boolean;
}

/** `POST /oauth2/token`: an access token granted or refused. */
export interface TokenEvent extends AuditBase {
  kind: 'token';
  result: 'granted' | 'refused';
  /** Scopes granted (or requested, when refused). */
  scopes?: string[];
  /** OAuth `error` of a refusal (`invalid_client`, …). */
  error?: string;
  /** Set when the requested scopes were cut to the trail's `maxUrlLength`: their full length. */
  scopeLength?: number;
  /** Refusals counted into this event (refusals only). */
  repeated?: RepeatedRefusals;
}

/** SCIM `/Users`: a user created, updated, deactivated (`active: false`) or deleted. */
export interface ScimUserEvent extends AuditBase {
  kind: 'scim-user';
  action: 'create' | 'update' | 'deactivate' | 'delete';
  userId: string;
  /** The user's FHIR profile resource (`Patient/123`). */
  profile?: string;
}

/** `Project/$init`: a project created (its `projectId` is the new project). */
export interface ProjectInitEvent extends AuditBase {
  kind: 'project-init';
  projectName?: string;
}

/** `$new-client` and client revocation. */
export interface ClientEvent extends AuditBase {
  kind: 'client';
  action: 'register' | 'revoke';
  clientId: string;
  clientName?: string;
}

/** FHIR create, update or delete (plain, batch or transaction entry, upload): one event per request and kind. */
export interface FhirWriteEvent extends AuditBase {
  kind: 'fhir-write';
  interaction: 'create' | 'update' | 'delete';
  /** The resources written (`Observation/1`), at most a few; `count` tells how many in all. */
  references: string[];
  /** How many resources the request wrote with this interaction. @default references.length */
  count?: number;
}

/** A read or a search of patient-compartment data: one event per request. */
export interface FhirAccessEvent extends AuditBase {
  kind: 'fhir-access';
  interaction: 'read' | 'vread' | 'search-type';
  resourceType: string;
  /** For a read: the resource read (`Observation/1`). */
  reference?: string;
  /** For a search: the query string (`subject=Patient/1&_count=10`), kept base64 in `entity.query`. */
  query?: string;
  /** The patients whose compartment data was returned (ids). */
  patientIds?: string[];
  /** How many resources the answer held. */
  count?: number;
}

/**
 * A bulk export kick-off (accepted, or refused with `error` and `status`), completion, failure or
 * cancellation.
 */
export interface ExportEvent extends AuditBase {
  kind: 'export';
  phase: 'kickoff' | 'completed' | 'failed' | 'cancelled';
  /** The export job; absent for a refused kick-off (no job was created). */
  jobId?: string;
  level: 'system' | 'patient' | 'group';
  types?: string[];
  /** The `_since` instant, as given. */
  since?: string;
  /** The `_until` instant, as given. */
  until?: string;
  /** `organizeOutputBy`, when asked. */
  organizeOutputBy?: string;
  /** `allowPartialManifests=true` was asked. */
  allowPartialManifests?: true;
  groupId?: string;
  /** Resources exported per type (completion). */
  counts?: Record<string, number>;
  /** Why it failed, or why the kick-off was refused. */
  error?: string;
  /** The HTTP status of a refused kick-off (`429`, `400`, `503`, …). */
  status?: number;
}

/** A `$import` job kicked off, completed, failed, cancelled, or a kick-off refused. */
export interface ImportEvent extends AuditBase {
  kind: 'import';
  phase: 'kickoff' | 'completed' | 'failed' | 'cancelled';
  /** The import job; absent for a refused kick-off (no job was created). */
  jobId?: string;
  /** Where the data comes from: the manifest URL, or the origins of the input files. */
  source?: string;
  /** Resources written per type (completion). */
  counts?: Record<string, number>;
  /** Deletes applied from `deleted` files (completion). */
  deleted?: number;
  /** Lines refused (completion). */
  refused?: number;
  /** Why it failed, or why the kick-off was refused. */
  error?: string;
  /** The HTTP status of a refused kick-off. */
  status?: number;
}

/** One export file served (or a Range of it). */
export interface DownloadEvent extends AuditBase {
  kind: 'download';
  jobId: string;
  /** The file's name (`Patient-1.ndjson`). */
  file: string;
  /** Bytes sent. */
  bytes: number;
  /** The `Range` header served, when partial (`bytes=0-1023`). */
  range?: string;
  /** Why the download did not complete (the client went away, the range was not satisfiable). */
  error?: string;
}

/** A request refused with 401, 403 or 404 (another project's id, a token without scope, …). */
export interface RefusedEvent extends AuditBase {
  kind: 'refused';
  status: 401 | 403 | 404;
  method: string;
  /** The request path with its query (the trail keeps at most `maxUrlLength` characters). */
  path: string;
  /** Set when `path` was cut to the trail's `maxUrlLength`: its full length. */
  pathLength?: number;
  /** The resource asked for (`Patient/123`), when the URL names one. */
  reference?: string;
  reason?: string;
  /** Refusals counted into this event. */
  repeated?: RepeatedRefusals;
}

/**
 * A user's sign-in through the project's identity provider for a SMART app (`federatedSignIn`):
 * the user found, or refused with the reason (an unknown or inactive user, an identity provider
 * error, a state that does not match).
 */
export interface SignInEvent extends AuditBase {
  kind: 'sign-in';
  result: 'success' | 'refused';
  /** Why it was refused (`unknown-user`, `inactive-user`, `idp-error`, `bad-state`, …). */
  reason?: string;
  /** The SMART app the user signs in to. */
  clientId?: string;
  /** The identity provider's issuer. */
  issuer?: string;
  /** The identity the provider asserted: the claim compared (`email`) and its value. */
  claim?: string;
  identity?: string;
}

/**
 * How the roles of a user's SCIM Groups capped what an app asked for (docs/login.md, "Roles"): the
 * mapped groups the user is an active member of, and the scopes asked for that they narrowed or
 * dropped (none: the roles allowed everything asked for).
 */
export interface RoleCapping {
  groups: string[];
  capped: string[];
}

/**
 * SMART App Launch: a user's consent to an app (`consent`, or `deny`), a token refresh (`refresh`),
 * a used authorization code or refresh token presented again (`reuse`: what it gave is revoked), a
 * token revoked at the revocation endpoint (`revoke`). A `consent` or `refresh` refused with reason
 * `roles`: the roles of the user's groups allowed none of the data scopes asked for.
 */
export interface AuthorizationEvent extends AuditBase {
  kind: 'authorization';
  action: 'consent' | 'deny' | 'refresh' | 'reuse' | 'revoke';
  result: 'granted' | 'refused';
  /** Why it was refused, when the action does not say it: `roles`. */
  reason?: 'roles';
  /** The app. */
  clientId: string;
  clientName?: string;
  /** Scopes consented to or granted (asked for, when refused). */
  scopes?: string[];
  /** The launch context patient's id. */
  patient?: string;
  /** The user is an active member of groups with roles: which, and what they capped. */
  roles?: RoleCapping;
}

/** Every kind of event the trail records. */
export type AuditRecord =
  | TokenEvent
  | ScimUserEvent
  | ProjectInitEvent
  | ClientEvent
  | FhirWriteEvent
  | FhirAccessEvent
  | ExportEvent
  | ImportEvent
  | DownloadEvent
  | RefusedEvent
  | SignInEvent
  | AuthorizationEvent;

export type AuditKind = AuditRecord['kind'];
