/**
 * What a browser gets from the platform's HTML pages, in one place: the security headers of every
 * page (the authorization endpoint's consent, patient picker and error pages; the federated
 * sign-in's refusal and failure pages, a host's replacements of any of them included) and the
 * attributes of the cookies those flows set, so that no page or cookie drifts from the others.
 */
import { parse, serialize } from 'cookie';
import type { Request, Response } from 'express';

/**
 * The Content-Security-Policy of every page (CSP Level 3), each directive chosen for what the
 * pages are: server-rendered HTML forms, with no script, image, font, frame or fetch.
 * - `default-src 'none'`: nothing is loaded and no script runs.
 * - `style-src 'unsafe-inline'`: the default pages carry one `<style>` element, and a host's
 *   replacement pages (`pages`, `renderRefusal`) may carry theirs; a style runs no code.
 * - `base-uri 'none'`: no `<base>` can redirect a relative URL (the forms' are absolute anyway).
 * - `frame-ancestors 'none'`: no page is framed, so the Allow button cannot be clickjacked
 *   (`X-Frame-Options: DENY` says the same to browsers without CSP 2).
 * - No `form-action`: it does not fall back to `default-src`, and it must stay open. The consent
 *   form posts to the authorization endpoint, which answers with a redirect to the app's
 *   `redirect_uri` (another origin, a different one per app), and browsers check `form-action`
 *   against the redirects that follow a submission too: `'self'` would block every approval.
 */
export const PAGE_CONTENT_SECURITY_POLICY =
  "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; frame-ancestors 'none'";

/**
 * The headers of every HTML page: never cached (a page carries a one-time ticket and CSRF value),
 * never framed, never sniffed as another type, and no `Referer` to another site (the pages' URLs
 * carry the ticket, or the identity provider's `code` and `state` at the callback).
 */
export const PAGE_SECURITY_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'Content-Type': 'text/html; charset=utf-8',
  'Cache-Control': 'no-store',
  'Content-Security-Policy': PAGE_CONTENT_SECURITY_POLICY,
  'X-Frame-Options': 'DENY',
  'X-Content-Type-Options': 'nosniff',
  'Referrer-Policy': 'no-referrer',
});

/** Answers an HTML page with {@link PAGE_SECURITY_HEADERS}. */
export function sendPage(res: Response, status: number, html: string): void {
  res.status(status).set(PAGE_SECURITY_HEADERS).end(html);
}

/**
 * A `Set-Cookie` value for the sign-in flows (RFC 6265bis): `HttpOnly` (no script reads it),
 * `SameSite=Lax` (the browser sends it on the top-level redirects back from the identity provider
 * and to the authorization endpoint, not on cross-site posts), scoped to the path of `url` (the
 * public URL of the endpoint that reads it) and `Secure` when that URL is https, whatever the
 * connection from a proxy in front was. A `maxAge` of 0 deletes the cookie.
 */
export function pageCookie(name: string, value: string, url: string, maxAge: number): string {
  const { pathname, protocol } = new URL(url);
  return serialize(name, value, {
    httpOnly: true,
    sameSite: 'lax',
    secure: protocol === 'https:',
    path: pathname,
    maxAge,
  });
}

/** The value of the request's cookie `name`, if it sent one. */
export function pageCookieValue(req: Request, name: string): string | undefined {
  return parse(req.headers.cookie ?? '')[name];
}
