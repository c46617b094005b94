import type { Request } from 'express';

/**
 * The origin tokens are issued by and for when the host configured no `issuer`: `baseUrl` when
 * given, otherwise the request's protocol and host. The token endpoint and `bearerAuth` agree on it
 * as long as they see the same public origin (set `baseUrl` or `issuer` behind a proxy).
 */
export function defaultIssuer(req: Request, baseUrl: string | undefined): string {
  return baseUrl ? baseUrl.replace(/\/+$/, '') : `${req.protocol}://${req.get('host') ?? 'localhost'}`;
}

/** An `issuer` or `audience` option: a fixed value, or one computed from the request. */
export type PerRequest = string | ((req: Request) => string);

/** The token `iss` and `aud` for `req`: the options when given, else `defaultIssuer` (`aud` = `iss`). */
export function tokenIdentity(
  req: Request,
  options: {
    issuer?: PerRequest | undefined;
    audience?: PerRequest | undefined;
    baseUrl?: string | undefined;
  },
): { issuer: string; audience: string } {
  const value = (option: PerRequest | undefined) => (typeof option === 'function' ? option(req) : option);
  const issuer = value(options.issuer) ?? defaultIssuer(req, options.baseUrl);
  return { issuer, audience: value(options.audience) ?? issuer };
}
