/**
 * What the two halves of the federated sign-in share (the start, which sends the browser to the
 * identity provider, and the callback, which takes its answer): the resolved configuration, the
 * project's provider, and the refusal that ends either with a page and an audit event.
 */
import type { Request, Response } from 'express';
import type * as oidc from 'openid-client';
import type { AuditRecord } from '../../audit/events.js';
import { recordSafely } from '../../audit/record-safely.js';
import type { AuditTrail } from '../../audit/trail.js';
import { NotFoundError } from '../../storage/errors.js';
import type { ProjectIdentityProvider, Storage } from '../../storage/types.js';
import { sendPage } from '../browser/page-security.js';
import {
  SIGN_IN_REFUSAL_STATUS,
  defaultRefusalPage,
  type SignInRefusal,
  type SignInRefusalReason,
} from '../browser/sign-in-pages.js';
import type { FederationCookies } from './federation-cookies.js';
import type { IdentityProviderClients } from './identity-provider-client.js';

/** The federated sign-in's configuration, every option resolved. */
export interface FederationContext {
  storage: Storage;
  defaultProvider: ProjectIdentityProvider | undefined;
  auditTrail: AuditTrail | undefined;
  onError: (error: unknown) => void;
  /** The refusal page's texts, the defaults filled in. */
  texts: Readonly<Record<SignInRefusalReason | 'title' | 'failed', string>>;
  renderRefusal: ((refusal: SignInRefusal) => string) | undefined;
  cookies: FederationCookies;
  clients: IdentityProviderClients;
  /** The absolute callback URL, the `redirect_uri` at every provider. */
  callbackUrl(req: Request): string;
}

/** Where a refusal happened, for its audit event. */
export interface RefusalContext {
  projectId: string | null;
  clientId?: string;
  issuer?: string;
  claim?: string;
}

/** Refused: the page is answered and the refusal audited. */
export class Refused extends Error {
  constructor(
    readonly reason: SignInRefusalReason,
    readonly detail: { identity?: string; error?: string; userId?: string; profile?: string } = {},
  ) {
    super(reason);
  }
}

/** Records a sign-in event (nothing without an audit trail). */
export function auditSignIn(ctx: FederationContext, record: AuditRecord): void {
  if (ctx.auditTrail) recordSafely(ctx.auditTrail, record, ctx.onError);
}

/** The identity provider of a project: its own, else the platform's default; none for a gone project. */
export async function providerOf(
  ctx: FederationContext,
  projectId: string,
): Promise<ProjectIdentityProvider | undefined> {
  try {
    return (await ctx.storage.readProject(projectId)).identityProvider ?? ctx.defaultProvider;
  } catch (error) {
    if (error instanceof NotFoundError) return undefined;
    throw error;
  }
}

/** The provider's `openid-client` configuration; refused as unavailable when discovery fails. */
export async function providerConfiguration(
  ctx: FederationContext,
  provider: ProjectIdentityProvider,
): Promise<oidc.Configuration> {
  try {
    return await ctx.clients.configuration(provider);
  } catch (error) {
    ctx.onError(error);
    throw new Refused('idp-unavailable');
  }
}

/** The audit event of a refusal: who was refused (the user when known), where and why. */
function refusalEvent(req: Request, refused: Refused, context: RefusalContext): AuditRecord {
  const { identity, userId, profile } = refused.detail;
  return {
    kind: 'sign-in',
    result: 'refused',
    reason: refused.reason,
    projectId: context.projectId,
    actor: {
      kind: userId !== undefined ? 'user' : 'anonymous',
      ...(userId !== undefined ? { id: userId } : {}),
      ...(profile !== undefined ? { profile } : {}),
      ...(identity !== undefined ? { name: identity } : {}),
    },
    address: req.ip,
    ...(context.clientId !== undefined ? { clientId: context.clientId } : {}),
    ...(context.issuer !== undefined ? { issuer: context.issuer } : {}),
    ...(context.claim !== undefined && identity !== undefined ? { claim: context.claim, identity } : {}),
  };
}

/** Answers the refusal page (the host's `renderRefusal`, else the default) and records the refusal. */
export function refuse(
  ctx: FederationContext,
  req: Request,
  res: Response,
  refused: Refused,
  context: RefusalContext,
): void {
  auditSignIn(ctx, refusalEvent(req, refused, context));
  const { identity, error } = refused.detail;
  const refusal: SignInRefusal = {
    reason: refused.reason,
    status: SIGN_IN_REFUSAL_STATUS[refused.reason],
    message: ctx.texts[refused.reason],
    ...(identity !== undefined ? { identity } : {}),
    ...(error !== undefined ? { error } : {}),
  };
  const html = ctx.renderRefusal ? ctx.renderRefusal(refusal) : defaultRefusalPage(refusal, ctx.texts.title);
  sendPage(res, refusal.status, html);
}
