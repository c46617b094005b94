import express, { type Express } from 'express';
import { bearerAuth, type BearerAuthOptions } from '../../src/auth/access/bearer-auth.js';
import { canAccess } from '../../src/auth/access/access.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import { tokenRouter, type TokenRouterOptions } from '../../src/auth/token/token-router.js';
import { getPrincipal, requirePrincipal } from '../../src/http/authenticate.js';
import { fhirErrorHandler } from '../../src/http/error-rendering.js';
import { FhirError } from '../../src/http/http-error.js';
import type { Storage } from '../../src/storage/types.js';

export const BASE_URL = 'https://fhir.example.org';
export const TOKEN_URL = `${BASE_URL}/oauth2/token`;

/**
 * A small host: the token router at /oauth2/token and one FHIR-like route guarded by bearerAuth
 * and canAccess, answering the principal it saw.
 */
export function authApp(
  storage: Storage,
  options: {
    token?: Partial<TokenRouterOptions>;
    bearer?: Partial<BearerAuthOptions>;
    baseUrl?: string | null;
  } = {},
): Express {
  const baseUrl = options.baseUrl === null ? undefined : (options.baseUrl ?? BASE_URL);
  const keys = signingKeys(storage);
  const app = express();
  app.use(
    '/oauth2/token',
    tokenRouter({ storage, baseUrl, signingKeys: keys, onError: () => {}, ...options.token }),
  );
  const authenticate = bearerAuth({ storage, baseUrl, signingKeys: keys, ...options.bearer });
  app.get('/fhir/R4/:type', requirePrincipal(authenticate), (req, res) => {
    const principal = getPrincipal(res);
    const type = String(req.params.type);
    if (!canAccess(principal, type, 'search'))
      throw new FhirError(403, 'forbidden', 'Scope does not cover the type');
    res.json(principal);
  });
  app.use(
    '/fhir/R4',
    fhirErrorHandler(() => {}),
  );
  return app;
}
