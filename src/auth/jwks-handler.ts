import type { RequestHandler } from 'express';
import { asyncHandler } from '../http/async-handler.js';
import { requireStorage } from '../http/options.js';
import type { Storage } from '../storage/types.js';
import { signingKeys as createSigningKeys, type SigningKeys } from './signing-keys.js';

/** Options of `jwksHandler`. */
export interface JwksHandlerOptions {
  /** Where the signing keys live. */
  storage: Storage;
  /**
   * The signing keys to publish.
   * @default signingKeys(storage)
   */
  signingKeys?: SigningKeys;
}

/**
 * Publishes the public keys that verify this server's access tokens (RFC 7517 §5), for resource
 * servers that check tokens themselves. Mount it with `app.get('/oauth2/jwks', handler)`.
 */
export function jwksHandler(options: JwksHandlerOptions): RequestHandler {
  requireStorage('jwksHandler', options);
  const keys = options.signingKeys ?? createSigningKeys(options.storage);
  return asyncHandler(async (_req, res) => {
    const jwks = await keys.jwks();
    res
      .set('Cache-Control', 'public, max-age=300')
      .type('application/jwk-set+json')
      .send(JSON.stringify(jwks));
  });
}
