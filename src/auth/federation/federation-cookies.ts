/**
 * The federated sign-in's state between requests, held by the browser in HttpOnly cookies whose
 * values are JWTs signed with the platform's signing keys: any instance sharing the store (and so
 * the keys) reads what another wrote, and nothing is kept in a process. Two cookies:
 *
 * - the transaction (`fpk-fed-<state>`, path: the callback), from the redirect to the identity
 *   provider to its answer: the project, the ticket, the PKCE verifier, the nonce;
 * - the signed-in user (`fpk-signin-<ticket hash>`, path: the authorization endpoint), from the
 *   callback to the authorization endpoint's resume: which user signed in for which ticket.
 *
 * Each JWT has its own `typ` and an audience naming its purpose, so that neither can pass for the
 * other nor for an access token (`at+jwt`).
 */
import { createHash } from 'node:crypto';
import type { Request, Response } from 'express';
import { SignJWT, decodeProtectedHeader, jwtVerify, type JWTPayload } from 'jose';
import { pageCookie, pageCookieValue } from '../browser/page-security.js';
import type { SigningKeys } from '../keys/signing-keys.js';

const TYP = 'fpk-federation+jwt';
const TRANSACTION_AUDIENCE = 'urn:fhir-platform-kit:federation-transaction';
const SIGNED_IN_AUDIENCE = 'urn:fhir-platform-kit:federation-signed-in';

/** What the callback needs to finish a sign-in started by the authorization endpoint. */
export interface FederationTransaction {
  projectId: string;
  clientId: string;
  ticket: string;
  resumeUrl: string;
  /** The callback URL sent as `redirect_uri` (the token request repeats it). */
  redirectUri: string;
  /** The provider's issuer the browser was sent to. */
  issuer: string;
  state: string;
  nonce: string;
  codeVerifier: string;
}

/** Who signed in for a ticket. */
export interface SignedInTicket {
  projectId: string;
  ticket: string;
  userId: string;
}

/** Reads and writes the two cookies of one `federatedSignIn`. */
export interface FederationCookies {
  setTransaction(req: Request, res: Response, transaction: FederationTransaction): Promise<void>;
  /** The transaction of `state`, when its cookie is there, authentic and not expired. */
  readTransaction(req: Request, state: string): Promise<FederationTransaction | undefined>;
  clearTransaction(req: Request, res: Response, transaction: FederationTransaction): void;
  setSignedIn(req: Request, res: Response, signedIn: SignedInTicket, resumeUrl: string): Promise<void>;
  /** The user signed in for `ticket` of `projectId` in this browser, if any. */
  readSignedIn(req: Request, projectId: string, ticket: string): Promise<string | undefined>;
}

/** A cookie name part from any text: base64url of its SHA-256, cut (names allow few characters). */
function nameOf(text: string): string {
  return createHash('sha256').update(text).digest('base64url').slice(0, 22);
}

const transactionName = (state: string) => `fpk-fed-${nameOf(state)}`;
const signedInName = (ticket: string) => `fpk-signin-${nameOf(ticket)}`;

/** The cookies of a `federatedSignIn` signed with `keys`; each lives `lifetime` seconds. */
export function federationCookies(keys: SigningKeys, lifetime: number): FederationCookies {
  async function sign(payload: JWTPayload, audience: string): Promise<string> {
    const key = await keys.current();
    return new SignJWT(payload)
      .setProtectedHeader({ alg: key.alg, kid: key.kid, typ: TYP })
      .setAudience(audience)
      .setIssuedAt()
      .setExpirationTime(`${lifetime}s`)
      .sign(key.privateKey);
  }

  async function verify(token: string | undefined, audience: string): Promise<JWTPayload | undefined> {
    if (!token) return undefined;
    try {
      const { kid } = decodeProtectedHeader(token);
      const key = kid === undefined ? undefined : await keys.resolve(kid);
      if (!key) return undefined;
      const { payload } = await jwtVerify(token, key.publicKey, {
        audience,
        typ: TYP,
        algorithms: [key.alg],
      });
      return payload;
    } catch {
      return undefined; // forged, expired or garbled: as if absent
    }
  }

  /** Sets a cookie for the endpoint at `url` (see `pageCookie`). */
  function setCookie(res: Response, name: string, value: string, url: string, maxAge: number) {
    res.append('Set-Cookie', pageCookie(name, value, url, maxAge));
  }

  return {
    async setTransaction(req, res, transaction) {
      const token = await sign({ ...transaction }, TRANSACTION_AUDIENCE);
      setCookie(res, transactionName(transaction.state), token, transaction.redirectUri, lifetime);
    },

    async readTransaction(req, state) {
      const payload = await verify(pageCookieValue(req, transactionName(state)), TRANSACTION_AUDIENCE);
      if (!payload || payload.state !== state) return undefined;
      const fields = [
        'projectId',
        'clientId',
        'ticket',
        'resumeUrl',
        'redirectUri',
        'issuer',
        'nonce',
        'codeVerifier',
      ];
      if (!fields.every((f) => typeof payload[f] === 'string')) return undefined;
      return payload as unknown as FederationTransaction;
    },

    clearTransaction(req, res, transaction) {
      setCookie(res, transactionName(transaction.state), '', transaction.redirectUri, 0);
    },

    async setSignedIn(req, res, signedIn, resumeUrl) {
      const token = await sign({ ...signedIn }, SIGNED_IN_AUDIENCE);
      setCookie(res, signedInName(signedIn.ticket), token, resumeUrl, lifetime);
    },

    async readSignedIn(req, projectId, ticket) {
      const payload = await verify(pageCookieValue(req, signedInName(ticket)), SIGNED_IN_AUDIENCE);
      if (!payload || payload.ticket !== ticket || payload.projectId !== projectId) return undefined;
      return typeof payload.userId === 'string' ? payload.userId : undefined;
    },
  };
}
