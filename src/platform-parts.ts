import type { Request } from 'express';
import type { Authenticate } from './http/principal.js';
import { bearerAuth, type BearerAuthOptions } from './auth/access/bearer-auth.js';
import { signingKeys as createSigningKeys, type SigningKeys } from './auth/keys/signing-keys.js';
import { MemoryGrants } from './storage/memory-grants.js';
import type { GrantStore, Storage } from './storage/types.js';
import type { bulkExportRouter } from './bulk/router.js';
import type { ErrorLogger } from './http/error-rendering.js';
import type { Logger } from './common/logger.js';
import { errorSink } from './http/request-logging.js';
import { safeAuditTrail } from './audit/record-safely.js';
import { createAuditTrail } from './audit/trail.js';
import { defaultIssuer } from './auth/token/issuer.js';
import type { FhirPlatformOptions, PlatformSettings } from './platform-options.js';

/** What the routers of one platform share: keys, grants, issuers, authentication, the audit trail. */
export interface PlatformParts extends PlatformSettings {
  options: FhirPlatformOptions;
  storage: Storage;
  baseUrl: string | undefined;
  /** The path the platform's router is mounted at, per request (set by its first middleware). */
  mounts: WeakMap<Request, string>;
  /** The issuer as the platform computes it: origin (or `baseUrl`) and mount path. */
  platformIssuer: (req: Request) => string;
  issuer: string | ((req: Request) => string);
  audience: string | ((req: Request) => string);
  keys: SigningKeys;
  grants: GrantStore;
  fhirBase: (req: Request) => string;
  authenticate: Authenticate;
  scimAuthenticate: Authenticate;
  auditTrail: ReturnType<typeof safeAuditTrail>;
  /** The options every data router shares. */
  common: {
    storage: Storage;
    authenticate: Authenticate;
    baseUrl: string | undefined;
    onError?: ErrorLogger;
    logger?: Logger;
    auditTrail: ReturnType<typeof safeAuditTrail>;
  };
}

/** What has started and must be stopped if the platform cannot be built (or when it closes). */
export interface Started {
  bulk?: ReturnType<typeof bulkExportRouter>;
}

/** Builds the parts the routers share from checked options. */
export function platformParts(options: FhirPlatformOptions, settings: PlatformSettings): PlatformParts {
  const { storage, baseUrl } = options;
  const { paths, logging } = settings;
  // The path this router is mounted at, per request (this instance's own map: two platforms in
  // one app never read each other's): tokens are issued by and for `origin + mount`.
  const mounts = new WeakMap<Request, string>();
  const platformIssuer = (req: Request): string => `${defaultIssuer(req, baseUrl)}${mounts.get(req) ?? ''}`;
  const issuer = options.token?.issuer ?? platformIssuer;
  const audience = options.token?.audience ?? issuer;
  // One key set shared by the token endpoint, the verifier and the JWKS endpoint.
  const keys: SigningKeys =
    options.token?.signingKeys ?? createSigningKeys(storage, options.token?.signingKeyOptions);
  // SMART App Launch grants: the store's, or this platform's own memory (one process).
  const grants: GrantStore = options.token?.grants ?? storage.grants ?? new MemoryGrants();
  const fhirBase = (req: Request): string => `${platformIssuer(req)}${paths.fhir}`;
  const verifier: BearerAuthOptions = { storage, baseUrl, signingKeys: keys, issuer, audience, grants };
  const authenticate = options.authenticate ?? bearerAuth(verifier);
  const scimAuthenticate =
    options.authenticate ??
    (options.scimBasicAuth ? bearerAuth({ ...verifier, allowBasic: true }) : authenticate);
  const auditErrors = options.audit?.onError ?? errorSink(logging);
  // Auditing never fails a request: a failure to record goes to the trail's error sink.
  const auditTrail = safeAuditTrail(
    createAuditTrail({ ...options.audit, storage, onError: auditErrors }),
    auditErrors,
  );
  const common = { storage, authenticate, baseUrl, ...logging, auditTrail };
  return {
    ...settings,
    options,
    storage,
    baseUrl,
    mounts,
    platformIssuer,
    issuer,
    audience,
    keys,
    grants,
    fhirBase,
    authenticate,
    scimAuthenticate,
    auditTrail,
    common,
  };
}
