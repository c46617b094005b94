import { Router } from 'express';
import { platformAdmin, type PlatformAdmin } from './platform-admin.js';
import type { Authenticate } from './auth/principal.js';
import { bearerAuth, type BearerAuthOptions } from './auth/bearer-auth.js';
import { signingKeys as createSigningKeys, type SigningKeys } from './auth/signing-keys.js';
import { tokenRouter, type TokenRouterOptions } from './auth/token-router.js';
import { smartConfigurationHandler, smartSecurity } from './auth/smart-configuration.js';
import { jwksHandler } from './auth/jwks-handler.js';
import { bulkExportRouter, type BulkExportRouterOptions } from './bulk/router.js';
import { bulkExportCapability } from './bulk/capability.js';
import { fhirRouter } from './fhir/router.js';
import type { FhirRouterOptions } from './fhir/router-options.js';
import { projectRouter, type ProjectRouterOptions } from './project/router.js';
import { scimRouter, type ScimRouterOptions } from './scim/router.js';
import type { ErrorLogger } from './http/error-rendering.js';
import { optionError, requireStorage } from './http/options.js';
import type { Storage } from './storage/types.js';

type Own<T> = Partial<Omit<T, 'storage' | 'authenticate' | 'baseUrl' | 'onError'>>;

/** Options of {@link fhirPlatform}. */
export interface FhirPlatformOptions {
  /** Where everything lives (`fileStorage({ dir })`, `memoryStorage()`, a PostgreSQL store, …). */
  storage: Storage;
  /**
   * Directory for bulk export files (created when missing).
   * @default required unless `bulk` is `false`
   */
  exportDir?: string;
  /**
   * Public origin (`https://fhir.example.org`), used for absolute URLs, the token `aud` and `iss`.
   * @default undefined (each request's own origin; set Express `trust proxy` behind a proxy)
   */
  baseUrl?: string;
  /**
   * Resolves callers. The default verifies access tokens from the mounted token endpoint.
   * @default bearerAuth({ storage, baseUrl })
   */
  authenticate?: Authenticate;
  /**
   * Accept HTTP Basic (client id + secret) on the SCIM routes, as Okta offers. Only with the
   * built-in authentication: combined with `authenticate` it is an option error.
   * @default false
   */
  scimBasicAuth?: boolean;
  /** Mount paths. @default { fhir: '/fhir/R4', scim: '/scim/v2', token: '/oauth2/token', jwks: '/oauth2/jwks' } */
  paths?: Partial<{ fhir: string; scim: string; token: string; jwks: string }>;
  /** Extra options of each router (shared ones above win). @default {} */
  fhir?: Own<FhirRouterOptions>;
  scim?: Own<ScimRouterOptions>;
  project?: Own<ProjectRouterOptions>;
  /** Bulk export router options, or `false` to mount no bulk export. @default {} */
  bulk?: Own<BulkExportRouterOptions> | false;
  token?: Own<TokenRouterOptions>;
  /** Receives every error answered with a 5xx status. @default writes to stderr */
  onError?: ErrorLogger;
}

/** What {@link fhirPlatform} returns: one router to mount at the host's root, and its lifecycle. */
export interface FhirPlatform {
  router: Router;
  /**
   * Administration without HTTP (init a project, register and revoke clients, create SCIM users),
   * through the same code as the HTTP operations, acting as the super admin.
   */
  admin: PlatformAdmin;
  /** Resolves when background work (export job resume) has started. */
  ready: Promise<void>;
  /** Stops export workers and timers. Does not close the storage (the host owns it). */
  close(): Promise<void>;
}

const DEFAULT_PATHS = { fhir: '/fhir/R4', scim: '/scim/v2', token: '/oauth2/token', jwks: '/oauth2/jwks' };

function normalisePath(name: string, value: string): string {
  if (!value.startsWith('/') || value.endsWith('/')) {
    optionError(
      'fhirPlatform',
      `paths.${name}`,
      `paths.${name} must start with "/" and not end with "/" (got "${value}")`,
    );
  }
  return value;
}

/**
 * Mounts every router at the default paths, for hosts that want everything in one call:
 * `app.use(fhirPlatform({ storage, exportDir }).router)`. Hosts that want some surfaces only mount
 * the routers one by one (`tokenRouter`, `scimRouter`, `projectRouter`, `bulkExportRouter`,
 * `fhirRouter`).
 */
export function fhirPlatform(options: FhirPlatformOptions): FhirPlatform {
  requireStorage('fhirPlatform', options);
  const { storage, baseUrl, onError } = options;
  const paths = { ...DEFAULT_PATHS, ...options.paths };
  for (const [name, value] of Object.entries(paths)) normalisePath(name, value);
  if (options.bulk !== false && !options.exportDir && !options.bulk?.exportDir) {
    optionError('fhirPlatform', 'exportDir', 'exportDir is required (or bulk: false)');
  }
  if (options.scimBasicAuth && options.authenticate) {
    // Basic is a mode of the built-in bearerAuth; a host's own authenticate decides alone.
    optionError(
      'fhirPlatform',
      'scimBasicAuth',
      'scimBasicAuth applies to the built-in bearerAuth only; with authenticate, accept Basic in it',
    );
  }

  // One key set shared by the token endpoint, the verifier and the JWKS endpoint.
  const keys: SigningKeys =
    options.token?.signingKeys ?? createSigningKeys(storage, options.token?.signingKeyOptions);
  const verifier: BearerAuthOptions = { storage, baseUrl, signingKeys: keys };
  const authenticate = options.authenticate ?? bearerAuth(verifier);
  const scimAuthenticate =
    options.authenticate ??
    (options.scimBasicAuth ? bearerAuth({ ...verifier, allowBasic: true }) : authenticate);
  const common = { storage, authenticate, baseUrl, ...(onError ? { onError } : {}) };

  const router = Router();
  router.use(
    paths.token,
    tokenRouter({ ...options.token, storage, baseUrl, signingKeys: keys, ...(onError ? { onError } : {}) }),
  );
  router.get(paths.jwks, jwksHandler({ storage, signingKeys: keys, ...(onError ? { onError } : {}) }));

  const smartConfig = smartConfigurationHandler({
    baseUrl,
    tokenEndpoint: paths.token,
    jwksEndpoint: paths.jwks,
    relativeToMount: true,
  });
  router.get('/.well-known/smart-configuration', smartConfig);
  router.get(`${paths.fhir}/.well-known/smart-configuration`, smartConfig);

  const scimOptions = { ...options.scim, ...common, authenticate: scimAuthenticate };
  const projectOptions = { ...options.project, ...common };
  router.use(paths.scim, scimRouter(scimOptions));
  router.use(paths.fhir, projectRouter(projectOptions));
  const admin = platformAdmin({ project: projectOptions, scim: scimOptions });

  let bulk: ReturnType<typeof bulkExportRouter> | undefined;
  if (options.bulk !== false) {
    bulk = bulkExportRouter({
      ...options.bulk,
      ...common,
      exportDir: options.bulk?.exportDir ?? options.exportDir,
    });
    router.use(paths.fhir, bulk);
  }

  const tokenPath = paths.token;
  router.use(
    paths.fhir,
    fhirRouter({
      ...options.fhir,
      ...common,
      capabilities: [
        ...(bulk ? [bulkExportCapability()] : []),
        {
          // The token URL is absolute; without a configured origin it follows the request's.
          customize: (statement) => {
            // `implementation.url` is the FHIR base as requested (origin, the host's mount path,
            // then paths.fhir): the token URL shares everything before paths.fhir.
            const implementation = statement.implementation as { url?: string } | undefined;
            const fhirBase = implementation?.url ?? baseUrl ?? '';
            const root = fhirBase.endsWith(paths.fhir) ? fhirBase.slice(0, -paths.fhir.length) : fhirBase;
            const rest = (statement.rest as Record<string, unknown>[] | undefined) ?? [];
            if (rest[0])
              rest[0].security = {
                ...(rest[0].security as object),
                ...smartSecurity(`${root}${tokenPath}`),
              };
            return statement;
          },
        },
        ...(options.fhir?.capabilities ?? []),
      ],
    }),
  );

  return {
    router,
    admin,
    ready: bulk ? bulk.ready : Promise.resolve(),
    close: async () => {
      await bulk?.close();
    },
  };
}
