import type { Request, RequestHandler } from 'express';
import { getPrincipal, requireProjectId } from '../http/authenticate.js';
import { canAccess } from '../auth/access/access.js';
import { FhirError } from '../http/http-error.js';
import { FhirOutcomeError } from '../http/outcome.js';
import { NotFoundError } from '../storage/errors.js';
import type { FhirResource, ProjectRecord } from '../storage/types.js';
import { inheritedNameIssues } from './validation/inherited-names.js';
import { transactionContext, type FhirContext } from './context.js';
import type { ResolvedFhirRouterOptions } from './router-options.js';
import { scopedStorage, userDataAccess } from './scoped-storage.js';
import { searchAdmission } from './search/search-admission.js';
import { clearedByFastPath } from './validation/structure-validator.js';
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
  const withContext: RequestHandler = (req, res, next) => {
    const principal = getPrincipal(res);
    const projectId = requireProjectId(principal);
    let project: Promise<ProjectRecord> | undefined;
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
      async validate(resource: FhirResource) {
        project ??= storage.readProject(projectId).catch((error: unknown) => {
          if (error instanceof NotFoundError) {
            throw new FhirError(403, 'forbidden', 'The project does not exist', { cause: error });
          }
          throw error;
        });
        if (!(await project).strictMode) return;
        // The default validator's compiled check clears most resources with no issue and no
        // unknown (so no inherited) element name: nothing else to do for those.
        if (clearedByFastPath(config.validator, resource)) return;
        // Checked here, not left to the validator: the default one does not see these names.
        const inherited = inheritedNameIssues(resource);
        const issues = inherited.length > 0 ? inherited : await config.validator(resource);
        if (issues.some((i) => i.severity === 'error' || i.severity === 'fatal'))
          throw new FhirOutcomeError(400, issues);
      },
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
