import type { RequestHandler } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { requireStorage } from '../../storage/storage-shape.js';
import { oauthErrorHandler, type ErrorLogger } from '../../http/error-rendering.js';
import type { Logger } from '../../common/logger.js';
import { errorSink } from '../../http/request-logging.js';
import type { Storage } from '../../storage/types.js';
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
  /** Receives every error answered with a 5xx status. @default writes to stderr (unless `logger` is given) */
  onError?: ErrorLogger;
  /** A pino-compatible logger receiving every 5xx error (see `CommonRouterOptions.logger`). @default undefined */
  logger?: Logger;
}

const JWKS_HANDLER_KEYS: OptionKeys<JwksHandlerOptions> = {
  storage: true,
  signingKeys: true,
  onError: true,
  logger: true,
};

/**
 * Publishes the public keys that verify this server's access tokens (RFC 7517 §5), for resource
 * servers that check tokens themselves. Mount it with `app.get('/oauth2/jwks', handler)`. A failure
 * (storage closed, …) answers RFC 6749 §5.2 error JSON, as the token endpoint does.
 */
export function jwksHandler(options: JwksHandlerOptions): RequestHandler {
  requireStorage('jwksHandler', options);
  checkOptionKeys('jwksHandler', options, JWKS_HANDLER_KEYS);
  const keys = options.signingKeys ?? createSigningKeys(options.storage);
  const errors = oauthErrorHandler(errorSink(options));
  const publish = asyncHandler(async (_req, res) => {
    const jwks = await keys.jwks();
    res
      .set('Cache-Control', 'public, max-age=300')
      .type('application/jwk-set+json')
      .send(JSON.stringify(jwks));
  });
  // Mounted alone (not in a router), it answers its own errors, as OAuth error JSON.
  return (req, res, next) => {
    publish(req, res, (error?: unknown) => (error === undefined ? next() : errors(error, req, res, next)));
  };
}
