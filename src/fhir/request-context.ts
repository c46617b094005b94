import type { Request, RequestHandler } from 'express';
import { getPrincipal, requireProjectId } from '../http/authenticate.js';
import { canAccess } from '../auth/access/access.js';
import { FhirError } from '../http/http-error.js';
import { NotFoundError } from '../storage/errors.js';
import type { FhirResource, ProjectRecord } from '../storage/types.js';
import { transactionContext, type FhirContext } from './context.js';
import type { ResolvedFhirRouterOptions } from './router-options.js';
import { scopedStorage, userDataAccess } from './scoped-storage.js';
import { searchAdmission } from './search/search-admission.js';
import { parsePrefer } from './prefer.js';
import { resourceValidation } from './validation/resource-validation.js';
import type { TerminologySource } from '../terminology/terminology-types.js';
import { inBackground } from '../http/foreground-requests.js';
import { storageTerminologySource } from '../terminology/storage-source.js';

/** The FHIR context of each request: the middleware that builds it, and its reader. */
export interface RequestContexts {
  /** Builds the request's context (after authentication). */
  withContext: RequestHandler;
  /** The context `withContext` built for `req` (a 500 without one: a route mounted without it). */
  contextOf: (req: Request) => FhirContext;
}

/**
 * Request contexts over `config.storage`: the principal's project, the store as the principal may
 * see it (a SMART user's compartment-limited view), and the project's strict mode, read once per
 * request and only by a write that validates.
 */
export function requestContexts(
  config: Pick<
    ResolvedFhirRouterOptions,
    'storage' | 'validator' | 'terminology' | 'searchAdmission' | 'searchTimeoutMs' | 'searchLimits'
  >,
): RequestContexts {
  const { storage } = config;
  const contexts = new WeakMap<Request, FhirContext>();
  const admission = searchAdmission(config.searchAdmission, config.searchTimeoutMs);
  const validation = resourceValidation(config.validator, config.terminology);
  const withContext: RequestHandler = (req, res, next) => {
    const principal = getPrincipal(res);
    const projectId = requireProjectId(principal);
    let read: Promise<ProjectRecord> | undefined;
    const project = (): Promise<ProjectRecord> =>
      (read ??= storage.readProject(projectId).catch((error: unknown) => {
        if (error instanceof NotFoundError) {
          throw new FhirError(403, 'forbidden', 'The project does not exist', { cause: error });
        }
        throw error;
      }));
    // Validation is the project's rule, not the caller's read: it sees every CodeSystem of the project.
    let unscoped: TerminologySource | undefined;
    const validationSource = (): TerminologySource =>
      (unscoped ??= storageTerminologySource(storage, projectId));
    const access = userDataAccess(principal, storage, projectId);
    const seen = access ? scopedStorage(storage, access) : storage;
    const ctx: FhirContext = {
      storage: seen,
      projectId,
      principal,
      ...(access ? { access } : {}),
      atomically: (fn) => storage.transaction((tx) => fn(transactionContext(ctx, tx))),
      // A turn of the project; nested costly reads (a Bundle's search inside a turn) take no other.
      // Waiting for it and running it is background work: other requests do not wait behind it.
      admit: (current, work) =>
        inBackground(req, () =>
          admission.run(projectId, (deadline) => work(admittedContext(current, deadline))),
        ),
      searchLimits: config.searchLimits,
      terminology: {
        service: config.terminology,
        // A project's own value sets and code systems are its data: read with the caller's rights.
        source: storageTerminologySource(seen, projectId, (type) => {
          if (!canAccess(principal, type, 'search'))
            throw new FhirError(403, 'forbidden', `Not allowed to search ${type} resources`);
        }),
      },
      ...(showsWriteOutcome(req) ? { validationWarnings: [] } : {}),
      async validate(resource: FhirResource) {
        const warnings = ctx.validationWarnings;
        const mode = { strict: (await project()).strictMode === true, warnings: warnings !== undefined };
        if (!mode.strict && !mode.warnings) return;
        const found = await validation.write(resource, mode, validationSource());
        warnings?.push(...found);
      },
      validationIssues: (resource) => validation.issues(resource, validationSource()),
    };
    contexts.set(req, ctx);
    next();
  };
  /** `ctx` in a turn that ends at `deadline`: costly reads it starts run at once, in that turn. */
  const admittedContext = (ctx: FhirContext, deadline: number): FhirContext => {
    return { ...ctx, deadline, admit: (current, work) => work(current) };
  };
  const contextOf = (req: Request): FhirContext => {
    const ctx = contexts.get(req);
    if (!ctx) throw new FhirError(500, 'exception', 'No FHIR context for this request');
    return ctx;
  };
  return { withContext, contextOf };
}

/**
 * True when `req` answers one write's OperationOutcome (`Prefer: return=OperationOutcome` on a
 * create, update or patch), which shows the validation warnings. The system-level `POST /` answers a
 * Bundle or an upload report: its entries' and lines' warnings would only pile up unread.
 */
function showsWriteOutcome(req: Request): boolean {
  return req.path !== '/' && parsePrefer(req.headers.prefer).return === 'OperationOutcome';
}
