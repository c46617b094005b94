/**
 * The default sign-in of the SMART authorization endpoint: the user signs in with the project's
 * OpenID Connect identity provider (Entra, Okta, Keycloak, …) and is matched to a SCIM user of the
 * project. See docs/login.md.
 */
import { randomBytes } from 'node:crypto';
import express, { type ErrorRequestHandler, type Request, type Response, type Router } from 'express';
import * as oidc from 'openid-client';
import type { AuditRecord } from '../../audit/events.js';
import { recordSafely } from '../../audit/record-safely.js';
import type { AuditTrail } from '../../audit/trail.js';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { optionError, optionalFunction, positiveInteger } from '../../common/options.js';
import { asyncHandler } from '../../http/async-handler.js';
import { defaultErrorLogger } from '../../http/error-rendering.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ProjectIdentityProvider, Storage, UserRecord } from '../../storage/types.js';
import { federationCookies, type FederationTransaction } from './federation-cookies.js';
import { IdTokenSignatureError } from './id-token-signature.js';
import { identityProviderClients } from './identity-provider-client.js';
import { identityProviderJwks, type IdentityProviderJwksOptions } from './identity-provider-keys.js';
import { signingKeys as createSigningKeys, type SigningKeys } from '../keys/signing-keys.js';
import {
  DEFAULT_SIGN_IN_TEXTS,
  SIGN_IN_REFUSAL_STATUS,
  defaultRefusalPage,
  sendPage,
  type SignInRefusal,
  type SignInRefusalReason,
} from '../browser/sign-in-pages.js';
import type { AuthenticateUser, SignInRequest } from '../authorize/user-sign-in.js';

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

const DEFAULT_SCOPE = 'openid email profile';
const DEFAULT_CLAIM = 'email';

/** Refused: the page is answered and the refusal audited. */
class Refused extends Error {
  constructor(
    readonly reason: SignInRefusalReason,
    readonly detail: { identity?: string; error?: string; userId?: string; profile?: string } = {},
  ) {
    super(reason);
  }
}

/**
 * The OAuth `error` of a failed token request: `openid-client` throws it in the error's `error`
 * (an error body) or in a `WWW-Authenticate` challenge (a 401 to a client that failed to
 * authenticate); anything else is an answer it could not verify.
 */
function oauthErrorCode(error: unknown): string {
  const { error: code, cause } = (error ?? {}) as { error?: unknown; cause?: unknown };
  if (typeof code === 'string') return code;
  const challenge = Array.isArray(cause) ? (cause[0] as { parameters?: { error?: unknown } }) : undefined;
  const fromChallenge = challenge?.parameters?.error;
  return typeof fromChallenge === 'string' ? fromChallenge : 'invalid response';
}

const random = () => randomBytes(32).toString('base64url');

/** The claim's value as text, when it is a non-empty string (or number). */
function claimText(value: unknown): string | undefined {
  if (typeof value === 'string' && value.trim() !== '') return value.trim();
  return typeof value === 'number' ? String(value) : undefined;
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
  if (!options || typeof options !== 'object') optionError(OWNER, 'options', 'options are required');
  checkOptionKeys(OWNER, options, KEYS);
  const { storage, defaultProvider, auditTrail } = options;
  if (!storage || typeof storage.readProject !== 'function')
    optionError(OWNER, 'storage', 'storage is required');
  optionalFunction(OWNER, 'renderRefusal', options.renderRefusal, undefined);
  if (defaultProvider !== undefined && (!defaultProvider.issuer || !defaultProvider.clientId)) {
    optionError(OWNER, 'defaultProvider', 'defaultProvider needs an issuer and a clientId');
  }
  const lifetime = positiveInteger(OWNER, 'lifetime', options.lifetime, 600);
  const discoveryTtl = positiveInteger(OWNER, 'discoveryTtl', options.discoveryTtl, 3600);
  const onError = options.onError ?? defaultErrorLogger;
  const texts = { ...DEFAULT_SIGN_IN_TEXTS, ...options.texts };
  const keys = options.signingKeys ?? createSigningKeys(storage);
  const cookies = federationCookies(keys, lifetime);
  const clients = identityProviderClients(discoveryTtl, identityProviderJwks(OWNER, options.jwks));

  const callbackUrl = (req: Request): string => {
    const given = options.callbackUrl;
    if (typeof given === 'function') return given(req);
    return (
      given ??
      `${req.protocol}://${req.get('host') ?? 'localhost'}/oauth2/federation${FEDERATION_CALLBACK_PATH}`
    );
  };

  function audit(record: AuditRecord): void {
    if (auditTrail) recordSafely(auditTrail, record, onError);
  }

  async function providerOf(projectId: string): Promise<ProjectIdentityProvider | undefined> {
    try {
      return (await storage.readProject(projectId)).identityProvider ?? defaultProvider;
    } catch (error) {
      if (error instanceof NotFoundError) return undefined;
      throw error;
    }
  }

  /** Answers the refusal page and records the refusal. */
  function refuse(
    req: Request,
    res: Response,
    refused: Refused,
    context: { projectId: string | null; clientId?: string; issuer?: string; claim?: string },
  ): void {
    const { identity, error } = refused.detail;
    audit({
      kind: 'sign-in',
      result: 'refused',
      reason: refused.reason,
      projectId: context.projectId,
      actor: {
        kind: refused.detail.userId !== undefined ? 'user' : 'anonymous',
        ...(refused.detail.userId !== undefined ? { id: refused.detail.userId } : {}),
        ...(refused.detail.profile !== undefined ? { profile: refused.detail.profile } : {}),
        ...(identity !== undefined ? { name: identity } : {}),
      },
      address: req.ip,
      ...(context.clientId !== undefined ? { clientId: context.clientId } : {}),
      ...(context.issuer !== undefined ? { issuer: context.issuer } : {}),
      ...(context.claim !== undefined && identity !== undefined ? { claim: context.claim, identity } : {}),
    });
    const refusal: SignInRefusal = {
      reason: refused.reason,
      status: SIGN_IN_REFUSAL_STATUS[refused.reason],
      message: texts[refused.reason],
      ...(identity !== undefined ? { identity } : {}),
      ...(error !== undefined ? { error } : {}),
    };
    const html = options.renderRefusal
      ? options.renderRefusal(refusal)
      : defaultRefusalPage(refusal, texts.title);
    sendPage(res, refusal.status, html);
  }

  async function configuration(provider: ProjectIdentityProvider): Promise<oidc.Configuration> {
    try {
      return await clients.configuration(provider);
    } catch (error) {
      onError(error);
      throw new Refused('idp-unavailable');
    }
  }

  /** The one user of the project whose attribute equals `value`. */
  async function matchUser(
    projectId: string,
    provider: ProjectIdentityProvider,
    value: string,
  ): Promise<UserRecord> {
    const attribute = provider.matchAttribute ?? 'email';
    const page = await storage.listUsers(projectId, { filter: { attribute, eq: value }, count: 2 });
    if (page.users.length === 0) throw new Refused('unknown-user', { identity: value });
    if (page.users.length > 1) throw new Refused('ambiguous-user', { identity: value });
    const user = page.users[0]!;
    const profile = `${user.userType}/${user.profileId}`;
    if (!user.active) throw new Refused('inactive-user', { identity: value, userId: user.id, profile });
    return user;
  }

  /** The value of the provider's configured claim, from the ID token or else userinfo. */
  async function assertedIdentity(
    config: oidc.Configuration,
    claimName: string,
    tokens: Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>,
  ): Promise<string> {
    const claims = tokens.claims();
    if (!claims) throw new Refused('idp-error', { error: 'no ID token' });
    let source: Record<string, unknown> = claims;
    if (claimText(claims[claimName]) === undefined && config.serverMetadata().userinfo_endpoint) {
      source = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub);
    }
    const value = claimText(source[claimName]);
    // An e-mail the provider says it did not verify names no one.
    if (value === undefined || (claimName === 'email' && source.email_verified === false)) {
      throw new Refused('missing-claim');
    }
    return value;
  }

  /** Refused unless the ID token is signed by a key the provider publishes. */
  async function checkSignature(
    provider: ProjectIdentityProvider,
    idToken: string | undefined,
  ): Promise<void> {
    if (idToken === undefined) throw new Refused('idp-error', { error: 'no ID token' });
    try {
      await clients.verifyIdTokenSignature(provider, idToken);
    } catch (error) {
      if (!(error instanceof IdTokenSignatureError)) throw error;
      if (error.reason !== 'keys-unavailable') throw new Refused('idp-error', { error: error.message });
      onError(error);
      throw new Refused('idp-unavailable');
    }
  }

  /**
   * The provider's tokens for the code of `current`: `openid-client` checks the answer and the ID
   * token's claims (issuer, audience, expiry, `nonce`), then its signature is checked.
   */
  async function verifiedTokens(
    config: oidc.Configuration,
    provider: ProjectIdentityProvider,
    transaction: FederationTransaction,
    current: URL,
  ): Promise<Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>> {
    let tokens: Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>;
    try {
      tokens = await oidc.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: transaction.codeVerifier,
        expectedState: transaction.state,
        expectedNonce: transaction.nonce,
        idTokenExpected: true,
      });
    } catch (cause) {
      throw new Refused('idp-error', { error: oauthErrorCode(cause) });
    }
    await checkSignature(provider, tokens.id_token);
    return tokens;
  }

  const authenticateUser: AuthenticateUser = async (req, res, signIn: SignInRequest) => {
    const { projectId, clientId, ticket, resumeUrl } = signIn;
    const userId = await cookies.readSignedIn(req, projectId, ticket);
    if (userId !== undefined) return { userId };
    const provider = await providerOf(projectId);
    try {
      if (!provider) throw new Refused('no-identity-provider');
      const config = await configuration(provider);
      const transaction: FederationTransaction = {
        projectId,
        clientId,
        ticket,
        resumeUrl,
        redirectUri: callbackUrl(req),
        issuer: provider.issuer,
        state: random(),
        nonce: random(),
        codeVerifier: oidc.randomPKCECodeVerifier(),
      };
      const url = oidc.buildAuthorizationUrl(config, {
        redirect_uri: transaction.redirectUri,
        scope: provider.scope ?? DEFAULT_SCOPE,
        state: transaction.state,
        nonce: transaction.nonce,
        code_challenge: await oidc.calculatePKCECodeChallenge(transaction.codeVerifier),
        code_challenge_method: 'S256',
      });
      await cookies.setTransaction(req, res, transaction);
      res.setHeader('Cache-Control', 'no-store');
      res.redirect(303, url.href);
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      refuse(req, res, error, { projectId, clientId, ...(provider ? { issuer: provider.issuer } : {}) });
    }
    return undefined;
  };

  async function callback(req: Request, res: Response): Promise<void> {
    const query = new URL(req.originalUrl, 'http://callback').searchParams;
    const state = query.get('state') ?? '';
    const transaction = state ? await cookies.readTransaction(req, state) : undefined;
    if (!transaction) {
      refuse(req, res, new Refused('bad-state'), { projectId: null });
      return;
    }
    cookies.clearTransaction(req, res, transaction);
    const { projectId, clientId } = transaction;
    const provider = await providerOf(projectId);
    const context = { projectId, clientId, issuer: transaction.issuer };
    try {
      // The provider the browser was sent to must still be the project's.
      if (!provider || provider.issuer !== transaction.issuer) throw new Refused('no-identity-provider');
      const claimName = provider.claim ?? DEFAULT_CLAIM;
      Object.assign(context, { claim: claimName });
      const error = query.get('error');
      if (error !== null) throw new Refused('idp-error', { error });
      const config = await configuration(provider);
      // The URL the provider redirected to, as it sent it: the registered callback and this query.
      const current = new URL(transaction.redirectUri);
      current.search = query.toString();
      const tokens = await verifiedTokens(config, provider, transaction, current);
      const identity = await assertedIdentity(config, claimName, tokens);
      const user = await matchUser(projectId, provider, identity);
      await cookies.setSignedIn(
        req,
        res,
        { projectId, ticket: transaction.ticket, userId: user.id },
        transaction.resumeUrl,
      );
      audit({
        kind: 'sign-in',
        result: 'success',
        projectId,
        actor: { kind: 'user', id: user.id, profile: `${user.userType}/${user.profileId}` },
        address: req.ip,
        clientId,
        issuer: provider.issuer,
        claim: claimName,
        identity,
      });
      res.setHeader('Cache-Control', 'no-store');
      res.redirect(303, transaction.resumeUrl);
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      refuse(req, res, error, context);
    }
  }

  const router = express.Router();
  router.get(FEDERATION_CALLBACK_PATH, asyncHandler(callback));
  // A browser gets a page, never a stack trace; the error goes to onError.
  const failed: ErrorRequestHandler = (error: unknown, _req, res, next) => {
    onError(error);
    if (res.headersSent) return next(error);
    sendPage(
      res,
      500,
      defaultRefusalPage({ reason: 'idp-unavailable', status: 500, message: texts.failed }, texts.title),
    );
  };
  router.use(failed);
  return { authenticateUser, router };
}
