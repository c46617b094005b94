import type { AuditTrail } from '../audit/trail.js';
import type { Authenticate } from '../auth/principal.js';
import type { Storage } from '../storage/types.js';
import type { ErrorLogger } from './error-rendering.js';
import type { Logger } from './logger.js';

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
   * Receives every error answered with a 5xx status, and errors of background work.
   * @default writes to stderr (unless `logger` is given)
   */
  onError?: ErrorLogger;
  /**
   * A pino-compatible logger: every 5xx error is logged through it (`error` level, secrets
   * redacted), in addition to `onError` when both are given.
   * @default undefined
   */
  logger?: Logger;
  /**
   * The audit trail the router records its actions in (`createAuditTrail`); `fhirPlatform`
   * passes its own. Without it nothing is recorded.
   * @default undefined
   */
  auditTrail?: AuditTrail;
}
