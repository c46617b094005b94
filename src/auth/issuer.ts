import type { Request } from 'express';

/**
 * The origin tokens are issued by and for when the host configured no `issuer`: `baseUrl` when
 * given, otherwise the request's protocol and host. The token endpoint and `bearerAuth` agree on it
 * as long as they see the same public origin (set `baseUrl` or `issuer` behind a proxy).
 */
export function defaultIssuer(req: Request, baseUrl: string | undefined): string {
  return baseUrl ? baseUrl.replace(/\/+$/, '') : `${req.protocol}://${req.get('host') ?? 'localhost'}`;
}
