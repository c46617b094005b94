import type { Request } from 'express';

/**
 * Why `value` cannot be a `baseUrl`, or undefined when it can: an absolute `http:` or `https:` URL
 * with a host, and neither credentials, query nor fragment (a path is kept: `https://host/api`).
 * `new URL()` alone is not enough: `localhost:3006` parses, as scheme `localhost:`, and every
 * advertised URL would then be `localhost:3006/oauth2/token`.
 */
export function baseUrlProblem(value: unknown): string | undefined {
  if (typeof value !== 'string') return 'must be a string';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute http or https URL (https://fhir.example.org)';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `must be an absolute http or https URL (https://fhir.example.org), not scheme "${url.protocol}"`;
  }
  // (The parser also takes `http:host` and `http:/host`.)
  if (!/^https?:\/\/[^/]/i.test(value) || !url.hostname)
    return 'must start with http:// or https:// and a host';
  if (url.username || url.password) return 'must not carry credentials';
  if (url.search || url.hash || value.includes('?') || value.includes('#')) {
    return 'must not have a query or fragment';
  }
  return undefined;
}

/**
 * The absolute URL of a path under the router's mount point. With `baseUrl` configured (the
 * server's public origin, e.g. `https://fhir.example.org`), it wins; otherwise the request's own
 * protocol and host are used (honouring `trust proxy` for `X-Forwarded-*`).
 */
export function absoluteUrl(req: Request, pathUnderMount: string, baseUrl?: string): string {
  const origin = baseUrl
    ? baseUrl.replace(/\/+$/, '')
    : `${req.protocol}://${req.get('host') ?? 'localhost'}`;
  const path =
    pathUnderMount.startsWith('/') || pathUnderMount === '' ? pathUnderMount : `/${pathUnderMount}`;
  return `${origin}${req.baseUrl}${path}`;
}

/** The full URL of the current request (mount path, path and query). */
export function requestUrl(req: Request, baseUrl?: string): string {
  const origin = baseUrl
    ? baseUrl.replace(/\/+$/, '')
    : `${req.protocol}://${req.get('host') ?? 'localhost'}`;
  return `${origin}${req.originalUrl}`;
}
