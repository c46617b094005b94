import type { Authenticate } from '../auth/principal.js';
import type { Storage } from '../storage/types.js';
import type { ErrorLogger } from './error-rendering.js';

/** Options every router factory takes. */
export interface CommonRouterOptions {
  /** Where every record lives. */
  storage: Storage;
  /** Resolves the caller of each request (for example `bearerAuth(...)`). */
  authenticate: Authenticate;
  /**
   * Public origin used to build absolute URLs (`https://fhir.example.org`). When absent, the
   * request's protocol and `Host` are used (set Express `trust proxy` behind a proxy).
   * @default undefined
   */
  baseUrl?: string;
  /**
   * Receives every error answered with a 5xx status.
   * @default writes to stderr
   */
  onError?: ErrorLogger;
}
