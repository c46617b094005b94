/**
 * The page a browser gets when the federated sign-in refuses it: a small HTML page that says why,
 * in texts the host may replace (`federatedSignIn({ texts })`) or with its own page altogether
 * (`federatedSignIn({ renderRefusal })`).
 */
import { escapeHtml } from './authorization-pages.js';

/** Why a sign-in was refused. */
export type SignInRefusalReason =
  /** No SCIM user of the project has the identity the provider asserted. */
  | 'unknown-user'
  /** Several SCIM users of the project have it. */
  | 'ambiguous-user'
  /** The SCIM user is deactivated (`active: false`). */
  | 'inactive-user'
  /** The provider asserted no value for the configured claim (or an e-mail it did not verify). */
  | 'missing-claim'
  /** The provider answered an error, or an ID token whose claims or signature fail verification. */
  | 'idp-error'
  /** The callback's `state` matches no sign-in started in this browser (expired, replayed, forged). */
  | 'bad-state'
  /** The project has no identity provider and the platform no default one. */
  | 'no-identity-provider'
  /** The provider could not be reached, or its discovery document or its keys (`jwks_uri`) read. */
  | 'idp-unavailable';

/** A refusal, as handed to `renderRefusal`. */
export interface SignInRefusal {
  reason: SignInRefusalReason;
  /** The HTTP status of the page. */
  status: number;
  /** The text of `texts` for the reason. */
  message: string;
  /** The identity the provider asserted (the claim's value), when known. */
  identity?: string;
  /**
   * For `idp-error`: the provider's OAuth `error` code, or why its answer failed verification
   * (`ID token signature invalid`, …).
   */
  error?: string;
}

/** The default texts, one per reason; `federatedSignIn({ texts })` replaces any of them. */
export const DEFAULT_SIGN_IN_TEXTS: Readonly<Record<SignInRefusalReason | 'title' | 'failed', string>> = {
  title: 'Sign-in refused',
  failed: 'The sign-in failed on our side. Try again later.',
  'unknown-user': 'Your account is not known to this project. Ask its administrators to give you access.',
  'ambiguous-user':
    'Several accounts of this project match your identity, so none can be chosen. Ask its administrators to fix this.',
  'inactive-user': 'Your account in this project is deactivated. Ask its administrators to reactivate it.',
  'missing-claim':
    'Your identity provider did not say who you are in the way this project needs (a verified e-mail or user name).',
  'idp-error': 'Your identity provider refused or failed the sign-in.',
  'bad-state':
    'This sign-in has expired or was not started in this browser. Go back to the application and start again.',
  'no-identity-provider': 'This project has no identity provider to sign in with. Ask its administrators.',
  'idp-unavailable': 'The identity provider cannot be reached right now. Try again later.',
};

/** The status of each refusal: the user's fault or the provider's. */
export const SIGN_IN_REFUSAL_STATUS: Readonly<Record<SignInRefusalReason, number>> = {
  'unknown-user': 403,
  'ambiguous-user': 403,
  'inactive-user': 403,
  'missing-claim': 403,
  'idp-error': 400,
  'bad-state': 400,
  'no-identity-provider': 403,
  'idp-unavailable': 502,
};

/** The default refusal page. */
export function defaultRefusalPage(refusal: SignInRefusal, title: string): string {
  const detail = [
    refusal.identity !== undefined ? `<p>Signed in as: <code>${escapeHtml(refusal.identity)}</code></p>` : '',
    refusal.error !== undefined ? `<p>Error: <code>${escapeHtml(refusal.error)}</code></p>` : '',
  ].join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title></head>
<body><main><h1>${escapeHtml(title)}</h1>
<p id="reason" data-reason="${refusal.reason}">${escapeHtml(refusal.message)}</p>${detail}</main></body></html>
`;
}
