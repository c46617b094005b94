/**
 * The default sign-in of the SMART authorization endpoint: the user signs in with the project's
 * OpenID Connect identity provider (Entra, Okta, Keycloak, …) and is matched to a SCIM user of the
 * project. See docs/login.md.
 */
import express, { type ErrorRequestHandler, type Request, type Router } from 'express';
import type { AuditTrail } from '../../audit/trail.js';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { optionError, optionalFunction, positiveInteger } from '../../common/options.js';
import { asyncHandler } from '../../http/async-handler.js';
import { defaultErrorLogger } from '../../http/error-rendering.js';
import type { ProjectIdentityProvider, Storage } from '../../storage/types.js';
import type { AuthenticateUser } from '../authorize/user-sign-in.js';
import { sendPage } from '../browser/page-security.js';
import {
  DEFAULT_SIGN_IN_TEXTS,
  defaultRefusalPage,
  type SignInRefusal,
  type SignInRefusalReason,
} from '../browser/sign-in-pages.js';
import { signingKeys as createSigningKeys, type SigningKeys } from '../keys/signing-keys.js';
import { federationCookies } from './federation-cookies.js';
import type { FederationContext } from './federation-context.js';
import { identityProviderClients } from './identity-provider-client.js';
import { identityProviderJwks, type IdentityProviderJwksOptions } from './identity-provider-keys.js';
import { signInCallback } from './sign-in-callback.js';
import { startSignIn } from './start-sign-in.js';

/** The path of the callback under the federation router's mount point. */
export const FEDERATION_CALLBACK_PATH = '/callback';

/** Options of {@link federatedSignIn}. */
export interface FederatedSignInOptions {
  /** The store of the projects (their `identityProvider`) and their SCIM users. */
  storage: Storage;
  /**
   * The absolute URL of the callback, the `redirect_uri` registered at every identity provider:
   * where the host mounts `router`, followed by `/callback`. A function computes it from the
   * authorization request.
   * @default `<request origin>/oauth2/federation/callback` (`fhirPlatform` passes its own mount)
   */
  callbackUrl?: string | ((req: Request) => string);
  /**
   * The identity provider of projects that configure none (`Project/{id}/$settings`).
   * @default undefined (such projects cannot sign users in)
   */
  defaultProvider?: ProjectIdentityProvider;
  /**
   * Signs the cookies that carry the sign-in between requests; instances sharing a store share
   * them, so any instance answers the callback.
   * @default signingKeys(storage)
   */
  signingKeys?: SigningKeys;
  /** Seconds a started sign-in may take, and a finished one waits for the authorization endpoint. @default 600 */
  lifetime?: number;
  /** Seconds discovered provider metadata is kept by this instance. @default 3600 */
  discoveryTtl?: number;
  /**
   * Fetching and caching of each provider's published keys (its `jwks_uri`), which verify the
   * signatures of its ID tokens.
   * @default {} (each field its default)
   */
  jwks?: IdentityProviderJwksOptions;
  /** Texts of the refusal page, by reason (and its `title`). @default DEFAULT_SIGN_IN_TEXTS */
  texts?: Partial<Record<SignInRefusalReason | 'title' | 'failed', string>>;
  /** Renders the whole refusal page instead of the default one (HTML). @default undefined */
  renderRefusal?: (refusal: SignInRefusal) => string;
  /** Records sign-ins and refusals (`sign-in` events). @default undefined (nothing recorded) */
  auditTrail?: AuditTrail;
  /** Receives unexpected errors (a failure to record, a provider failing). @default console.error */
  onError?: (error: unknown) => void;
}

/** What {@link federatedSignIn} returns. */
export interface FederatedSignIn {
  /** The `AuthenticateUser` for the authorization endpoint. */
  authenticateUser: AuthenticateUser;
  /** Answers the identity provider's redirect at `/callback`; mount it where `callbackUrl` points. */
  router: Router;
}

const OWNER = 'federatedSignIn';

const KEYS: OptionKeys<FederatedSignInOptions> = {
  storage: true,
  callbackUrl: true,
  defaultProvider: true,
  signingKeys: true,
  lifetime: true,
  discoveryTtl: true,
  jwks: true,
  texts: true,
  renderRefusal: true,
  auditTrail: true,
  onError: true,
};

/** Checks the options and resolves them once. */
function resolveFederation(options: FederatedSignInOptions): FederationContext {
  if (!options || typeof options !== 'object') optionError(OWNER, 'options', 'options are required');
  checkOptionKeys(OWNER, options, KEYS);
  const { storage, defaultProvider } = options;
  if (!storage || typeof storage.readProject !== 'function')
    optionError(OWNER, 'storage', 'storage is required');
  optionalFunction(OWNER, 'renderRefusal', options.renderRefusal, undefined);
  if (defaultProvider !== undefined && (!defaultProvider.issuer || !defaultProvider.clientId)) {
    optionError(OWNER, 'defaultProvider', 'defaultProvider needs an issuer and a clientId');
  }
  const lifetime = positiveInteger(OWNER, 'lifetime', options.lifetime, 600);
  const discoveryTtl = positiveInteger(OWNER, 'discoveryTtl', options.discoveryTtl, 3600);
  const keys = options.signingKeys ?? createSigningKeys(storage);
  return {
    storage,
    defaultProvider,
    auditTrail: options.auditTrail,
    onError: options.onError ?? defaultErrorLogger,
    texts: { ...DEFAULT_SIGN_IN_TEXTS, ...options.texts },
    renderRefusal: options.renderRefusal,
    cookies: federationCookies(keys, lifetime),
    clients: identityProviderClients(discoveryTtl, identityProviderJwks(OWNER, options.jwks)),
    callbackUrl(req: Request) {
      const given = options.callbackUrl;
      if (typeof given === 'function') return given(req);
      return (
        given ??
        `${req.protocol}://${req.get('host') ?? 'localhost'}/oauth2/federation${FEDERATION_CALLBACK_PATH}`
      );
    },
  };
}

/** A browser gets a page, never a stack trace; the error goes to `onError`. */
function failurePage(ctx: FederationContext): ErrorRequestHandler {
  return (error: unknown, _req, res, next) => {
    ctx.onError(error);
    if (res.headersSent) return next(error);
    const { texts } = ctx;
    const refusal = { reason: 'idp-unavailable', status: 500, message: texts.failed } as const;
    sendPage(res, 500, defaultRefusalPage(refusal, texts.title));
  };
}

/**
 * The federated sign-in: `authenticateUser` sends the browser to the project's identity provider
 * (OpenID Connect authorization code flow with PKCE S256, `state` and `nonce`); `router` takes its
 * answer at `/callback`, verifies the ID token, reads the configured claim (from the ID token, else
 * from userinfo) and finds the one SCIM user of the project whose `matchAttribute` equals it. An
 * active user is remembered for the ticket in this browser and the browser goes back to
 * `resumeUrl`, where `authenticateUser` answers `{ userId }`. Unknown, ambiguous or inactive users,
 * provider errors and a `state` this browser did not start get a page that says why; every sign-in
 * and refusal is an audit event (`sign-in`).
 */
export function federatedSignIn(options: FederatedSignInOptions): FederatedSignIn {
  const ctx = resolveFederation(options);
  const router = express.Router();
  router.get(
    FEDERATION_CALLBACK_PATH,
    asyncHandler((req, res) => signInCallback(ctx, req, res)),
  );
  router.use(failurePage(ctx));
  return { authenticateUser: startSignIn(ctx), router };
}
