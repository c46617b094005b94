/**
 * The federated sign-in's callback: the identity provider's answer (OpenID Connect Core 1.0
 * §3.1.2.5), checked step by step: the transaction this browser started, the provider still the
 * project's, the code traded for tokens whose ID token is verified, the configured claim read, and
 * the one SCIM user of the project it names. The user is remembered for the ticket in this browser
 * and the browser goes back to the authorization endpoint.
 */
import type { Request, Response } from 'express';
import * as oidc from 'openid-client';
import type { ProjectIdentityProvider, UserRecord } from '../../storage/types.js';
import type { FederationTransaction } from './federation-cookies.js';
import {
  Refused,
  auditSignIn,
  providerConfiguration,
  providerOf,
  refuse,
  type FederationContext,
  type RefusalContext,
} from './federation-context.js';
import { IdTokenSignatureError } from './id-token-signature.js';

const DEFAULT_CLAIM = 'email';

type ProviderTokens = Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>;

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

/** The claim's value as text, when it is a non-empty string (or number). */
function claimText(value: unknown): string | undefined {
  if (typeof value === 'string' && value.trim() !== '') return value.trim();
  return typeof value === 'number' ? String(value) : undefined;
}

/** Refused unless the ID token is signed by a key the provider publishes. */
async function checkSignature(
  ctx: FederationContext,
  provider: ProjectIdentityProvider,
  idToken: string | undefined,
): Promise<void> {
  if (idToken === undefined) throw new Refused('idp-error', { error: 'no ID token' });
  try {
    await ctx.clients.verifyIdTokenSignature(provider, idToken);
  } catch (error) {
    if (!(error instanceof IdTokenSignatureError)) throw error;
    if (error.reason !== 'keys-unavailable') throw new Refused('idp-error', { error: error.message });
    ctx.onError(error);
    throw new Refused('idp-unavailable');
  }
}

/**
 * The provider's tokens for the code in `current`: `openid-client` checks the answer and the ID
 * token's claims (issuer, audience, expiry, `nonce`), then its signature is checked.
 */
async function verifiedTokens(
  ctx: FederationContext,
  config: oidc.Configuration,
  provider: ProjectIdentityProvider,
  transaction: FederationTransaction,
  current: URL,
): Promise<ProviderTokens> {
  let tokens: ProviderTokens;
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
  await checkSignature(ctx, provider, tokens.id_token);
  return tokens;
}

/** The value of the provider's configured claim, from the ID token or else userinfo. */
async function assertedIdentity(
  config: oidc.Configuration,
  claimName: string,
  tokens: ProviderTokens,
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

/** The one user of the project whose attribute equals `value`, while active. */
async function matchUser(
  ctx: FederationContext,
  projectId: string,
  provider: ProjectIdentityProvider,
  value: string,
): Promise<UserRecord> {
  const attribute = provider.matchAttribute ?? 'email';
  const page = await ctx.storage.listUsers(projectId, { filter: { attribute, eq: value }, count: 2 });
  if (page.users.length === 0) throw new Refused('unknown-user', { identity: value });
  if (page.users.length > 1) throw new Refused('ambiguous-user', { identity: value });
  const user = page.users[0]!;
  const profile = `${user.userType}/${user.profileId}`;
  if (!user.active) throw new Refused('inactive-user', { identity: value, userId: user.id, profile });
  return user;
}

/** The user the provider's answer names, every check passed (else `Refused`). */
async function signedInUser(
  ctx: FederationContext,
  query: URLSearchParams,
  transaction: FederationTransaction,
  provider: ProjectIdentityProvider,
  claimName: string,
): Promise<{ user: UserRecord; identity: string }> {
  const error = query.get('error');
  if (error !== null) throw new Refused('idp-error', { error });
  const config = await providerConfiguration(ctx, provider);
  // The URL the provider redirected to, as it sent it: the registered callback and this query.
  const current = new URL(transaction.redirectUri);
  current.search = query.toString();
  const tokens = await verifiedTokens(ctx, config, provider, transaction, current);
  const identity = await assertedIdentity(config, claimName, tokens);
  return { user: await matchUser(ctx, transaction.projectId, provider, identity), identity };
}

/** Remembers the user for the ticket in this browser, records the sign-in and goes back. */
async function finishSignIn(
  ctx: FederationContext,
  req: Request,
  res: Response,
  transaction: FederationTransaction,
  signedIn: { user: UserRecord; identity: string; issuer: string; claim: string },
): Promise<void> {
  const { projectId, clientId, ticket, resumeUrl } = transaction;
  const { user, identity, issuer, claim } = signedIn;
  await ctx.cookies.setSignedIn(req, res, { projectId, ticket, userId: user.id }, resumeUrl);
  auditSignIn(ctx, {
    kind: 'sign-in',
    result: 'success',
    projectId,
    actor: { kind: 'user', id: user.id, profile: `${user.userType}/${user.profileId}` },
    address: req.ip,
    clientId,
    issuer,
    claim,
    identity,
  });
  res.setHeader('Cache-Control', 'no-store');
  res.redirect(303, resumeUrl);
}

/** Answers the provider's redirect to the callback. */
export async function signInCallback(ctx: FederationContext, req: Request, res: Response): Promise<void> {
  const query = new URL(req.originalUrl, 'http://callback').searchParams;
  const state = query.get('state') ?? '';
  const transaction = state ? await ctx.cookies.readTransaction(req, state) : undefined;
  if (!transaction) {
    refuse(ctx, req, res, new Refused('bad-state'), { projectId: null });
    return;
  }
  ctx.cookies.clearTransaction(req, res, transaction);
  const { projectId, clientId, issuer } = transaction;
  const provider = await providerOf(ctx, projectId);
  const context: RefusalContext = { projectId, clientId, issuer };
  try {
    // The provider the browser was sent to must still be the project's.
    if (!provider || provider.issuer !== issuer) throw new Refused('no-identity-provider');
    const claim = provider.claim ?? DEFAULT_CLAIM;
    context.claim = claim;
    const { user, identity } = await signedInUser(ctx, query, transaction, provider, claim);
    await finishSignIn(ctx, req, res, transaction, { user, identity, issuer, claim });
  } catch (error) {
    if (!(error instanceof Refused)) throw error;
    refuse(ctx, req, res, error, context);
  }
}
