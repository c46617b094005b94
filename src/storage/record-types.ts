/*
 * The records of the storage contract (see `./types.ts`): projects, users, memberships, clients,
 * signing keys, export jobs.
 */

/**
 * An opaque, plain-JSON marker of "the store as of now", taken at export kick-off and passed to
 * readers (possibly in a worker thread). Each adapter defines what it holds.
 */
export type ExportSnapshot = Record<string, unknown> & { takenAt: string };

export interface ProjectRecord {
  id: string;
  name: string;
  description?: string;
  /** Validate resources against the FHIR R4 structure definitions. */
  strictMode: boolean;
  /** Id of the user who owns the project (its first admin). */
  ownerUserId?: string;
  /** The project's SCIM settings; each one absent follows the `scimRouter` option. */
  scim?: ProjectScimSettings;
  /**
   * The project's OpenID Connect identity provider, through which its SCIM users sign in to SMART
   * apps (`federatedSignIn`); absent: the platform's default provider, if any.
   */
  identityProvider?: ProjectIdentityProvider;
  /**
   * The roles of the project's SCIM Groups: the most an active member of a group named here may be
   * granted when signing in to a SMART app (docs/login.md, "Roles"). Absent or empty: no group caps.
   */
  groupRoles?: ProjectGroupRole[];
  /**
   * The servers the project's `$import` pulls from, each with how the platform signs in there
   * (docs/project-init.md, `importSource`). Absent or empty: none registered.
   */
  importSources?: ProjectImportSource[];
  createdAt: string;
  updatedAt: string;
  /** Incremented on every change; the ETag of the record. */
  version: number;
}

/** Fields a caller may change on a project's update (full replacement of each given field). */
export type ProjectChanges = Partial<
  Pick<
    ProjectRecord,
    | 'name'
    | 'description'
    | 'strictMode'
    | 'ownerUserId'
    | 'scim'
    | 'identityProvider'
    | 'groupRoles'
    | 'importSources'
  >
>;

export type ProfileType = 'Patient' | 'Practitioner' | 'RelatedPerson';

/** Per-project overrides of the `scimRouter` options of the same names. */
export interface ProjectScimSettings {
  /** Profile type of a user created without `userType`. */
  defaultUserType?: ProfileType;
  /** Answer `userName` with the name the client sent instead of the profile id. */
  echoUserName?: boolean;
}

/** The role of one SCIM Group: the `user/` scopes its active members may be granted at most. */
export interface ProjectGroupRole {
  /** The group's `displayName`, as the setting gave it (compared case-insensitively). */
  group: string;
  /** SMART `user/` resource scopes (`user/*.rs`, `user/Observation.cruds`). */
  scopes: string[];
}

/** A server a project imports from (`$import`), and how the platform signs in there. */
export interface ProjectImportSource {
  /** The source's FHIR base URL (no query, no fragment, no trailing slash); a manifest or file URL under it uses this source's credentials. */
  url: string;
  /** The source's OAuth 2.0 token endpoint (SMART Backend Services). */
  tokenUrl: string;
  /** The platform's client id at the source. */
  clientId: string;
  /** The private JWK (RSA, EC or OKP, with `d`) that signs the client assertions. Stored to sign; never answered. */
  privateKey: Record<string, unknown>;
  /** Scopes asked of the source, space-separated. @default 'system/*.read' */
  scope?: string;
}

/** The SCIM user attribute an identity provider's claim is compared with. */
export type UserMatchAttribute = 'userName' | 'externalId' | 'email';

/**
 * A project's OpenID Connect identity provider (Entra, Okta, Keycloak, …): the platform signs in
 * to it as a relying party with the authorization code flow, then finds the SCIM user whose
 * `matchAttribute` equals the `claim` of the signed-in identity.
 */
export interface ProjectIdentityProvider {
  /** The issuer identifier; its `/.well-known/openid-configuration` is read. */
  issuer: string;
  /** The platform's client id at the provider. */
  clientId: string;
  /** The client secret (`client_secret_basic`). Stored to be sent; never answered. */
  clientSecret?: string;
  /** A private JWK (`private_key_jwt`), instead of a secret. Stored to sign; never answered. */
  privateKey?: Record<string, unknown>;
  /** Scopes asked of the provider, space-separated. @default 'openid email profile' */
  scope?: string;
  /** The claim (of the ID token, else of userinfo) that names the user. @default 'email' */
  claim?: string;
  /** The SCIM attribute the claim is compared with. @default 'email' */
  matchAttribute?: UserMatchAttribute;
}

export interface UserRecord {
  id: string;
  projectId: string;
  /**
   * The login name given by whoever created the user (an identity provider's `userName`), or the
   * profile resource id when none was given. Unique per project, compared case-insensitively.
   */
  userName: string;
  /** Identifier of the user in the provisioning client; unique per project when set. */
  externalId?: string;
  userType: ProfileType;
  /** Id of the linked FHIR resource of type `userType` in the same project. */
  profileId: string;
  active: boolean;
  /** Every other attribute of the user (SCIM `name`, `emails`, `displayName`, …). */
  data: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  version: number;
}

/** Fields a caller supplies on user create; the adapter fills id (when absent), times and version. */
export type NewUser = Omit<UserRecord, 'id' | 'createdAt' | 'updatedAt' | 'version'> & { id?: string };

/** Fields a caller may change on update (full replacement of each given field). */
export type UserChanges = Partial<
  Pick<UserRecord, 'userName' | 'externalId' | 'active' | 'data' | 'profileId'>
>;

export interface UserQuery {
  /** Case-insensitive match against the stored `userName`. */
  userName?: string;
  externalId?: string;
  profileId?: string;
}

export interface MembershipRecord {
  id: string;
  projectId: string;
  userId?: string;
  clientId?: string;
  /** Project-admin rights. */
  admin: boolean;
  /** `Type/id` of the member's FHIR profile, when it has one. */
  profile?: string;
  createdAt: string;
}

export type NewMembership = Omit<MembershipRecord, 'id' | 'createdAt'> & { id?: string };

export interface ClientRecord {
  /** The OAuth `client_id`. */
  id: string;
  /** Null only for a super-admin client, which belongs to no project. */
  projectId: string | null;
  name: string;
  /** Hash of the client secret (never the secret itself). */
  secretHash?: string;
  /** Inline public JWKS for `private_key_jwt`. */
  jwks?: { keys: Record<string, unknown>[] };
  jwksUri?: string;
  /** Space-separated scopes the client may be granted. */
  scope: string;
  admin: boolean;
  superAdmin: boolean;
  /** Access token lifetime in seconds; the server default when absent. */
  accessTokenLifetime?: number;
  /**
   * Redirect URIs of the authorization code flow (SMART App Launch), absolute; a request's
   * `redirect_uri` must equal one of them exactly. Absent: the client cannot use that flow.
   */
  redirectUris?: string[];
  /**
   * A public client (SMART `client-public`, a browser or native app that keeps no secret): it has
   * no secret nor keys and names itself by `client_id` alone at the token endpoint, for the
   * `authorization_code` and `refresh_token` grants only. Absent or false: confidential.
   */
  public?: boolean;
  revoked: boolean;
  createdAt: string;
  updatedAt: string;
}

export type NewClient = Omit<ClientRecord, 'createdAt' | 'updatedAt' | 'revoked'> & { revoked?: boolean };
export type ClientChanges = Partial<Omit<ClientRecord, 'id' | 'projectId' | 'createdAt' | 'updatedAt'>>;

/** A server signing key for access tokens. */
export interface SigningKeyRecord {
  kid: string;
  alg: string;
  privateJwk: Record<string, unknown>;
  publicJwk: Record<string, unknown>;
  createdAt: string;
  /** After this time the key signs no new token; it still verifies until `expiresAt`. */
  retiredAt?: string;
  /** After this time the key is no longer published nor accepted. */
  expiresAt?: string;
}

export type ExportJobStatus = 'accepted' | 'in-progress' | 'completed' | 'failed' | 'cancelled';

export interface ExportJobRecord {
  id: string;
  projectId: string;
  /** Client (or user) id of the principal that started the job. */
  ownerId: string;
  status: ExportJobStatus;
  /** The kick-off request URL, absolute, with its query. */
  request: string;
  /** Kick-off time (FHIR instant). */
  transactionTime: string;
  /** Parsed kick-off parameters, plain JSON. */
  params: Record<string, unknown>;
  /** The storage snapshot the job reads (plain JSON from `exportSnapshot`). */
  snapshot?: ExportSnapshot;
  progress?: Record<string, unknown>;
  /** Manifest `output` / `error` / `deleted` arrays once complete. */
  result?: Record<string, unknown>;
  /** OperationOutcome of a failed job. */
  failure?: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  /** When the job and its files may be removed. */
  expiresAt?: string;
  version: number;
}

export type NewExportJob = Omit<ExportJobRecord, 'createdAt' | 'updatedAt' | 'version'>;
export type ExportJobChanges = Partial<
  Pick<ExportJobRecord, 'status' | 'snapshot' | 'progress' | 'result' | 'failure' | 'expiresAt'>
>;
