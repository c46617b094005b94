import type { Request } from 'express';

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
