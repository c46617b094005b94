/**
 * The federated sign-in's `AuthenticateUser`: the user already signed in for this ticket in this
 * browser, or the browser sent to the project's identity provider (OpenID Connect authorization
 * code flow with PKCE S256, `state` and `nonce`; OpenID Connect Core 1.0 §3.1.2.1).
 */
import { randomBytes } from 'node:crypto';
import type { Request, Response } from 'express';
import * as oidc from 'openid-client';
import type { ProjectIdentityProvider } from '../../storage/types.js';
import type { AuthenticateUser, SignInRequest } from '../authorize/user-sign-in.js';
import type { FederationTransaction } from './federation-cookies.js';
import {
  Refused,
  providerConfiguration,
  providerOf,
  refuse,
  type FederationContext,
} from './federation-context.js';

const DEFAULT_SCOPE = 'openid email profile';

const random = () => randomBytes(32).toString('base64url');

/** Opens the sign-in's transaction (in its cookie) and redirects the browser to the provider. */
async function redirectToProvider(
  ctx: FederationContext,
  req: Request,
  res: Response,
  provider: ProjectIdentityProvider,
  signIn: SignInRequest,
): Promise<void> {
  const config = await providerConfiguration(ctx, provider);
  const { projectId, clientId, ticket, resumeUrl } = signIn;
  const transaction: FederationTransaction = {
    projectId,
    clientId,
    ticket,
    resumeUrl,
    redirectUri: ctx.callbackUrl(req),
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
  await ctx.cookies.setTransaction(req, res, transaction);
  res.setHeader('Cache-Control', 'no-store');
  res.redirect(303, url.href);
}

/** The `AuthenticateUser` of the federated sign-in over `ctx`. */
export function startSignIn(ctx: FederationContext): AuthenticateUser {
  return async (req, res, signIn) => {
    const { projectId, clientId, ticket } = signIn;
    const userId = await ctx.cookies.readSignedIn(req, projectId, ticket);
    if (userId !== undefined) return { userId };
    const provider = await providerOf(ctx, projectId);
    try {
      if (!provider) throw new Refused('no-identity-provider');
      await redirectToProvider(ctx, req, res, provider, signIn);
    } catch (error) {
      if (!(error instanceof Refused)) throw error;
      refuse(ctx, req, res, error, { projectId, clientId, ...(provider ? { issuer: provider.issuer } : {}) });
    }
    return undefined;
  };
}
