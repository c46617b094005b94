import { admitted } from '../search/costly-reads.js';
import type { Request, RequestHandler, Response, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { methodNotAllowed, sendFhir } from '../../http/protocol-responses.js';
import type { Storage, StoredResource } from '../../storage/types.js';
import { readAccess, searchAccess, type FhirAccessDetails } from '../audit/audit-activity.js';
import {
  buildHistoryBundle,
  parseHistoryRequest,
  readHistoryPage,
  readVersion,
  type HistoryTarget,
} from './history.js';
import { nativeBinaryContent, sendNativeBinary, wantsNativeBinary } from '../binary-content.js';
import type { FhirContext } from '../context.js';
import { parsePrefer } from '../prefer.js';

/** What the history routes need of the FHIR router. */
export interface HistoryRouteDeps {
  storage: Storage;
  /** Checks the type and id in the URL (unknown type: 404, bad id: 400). */
  guard: RequestHandler;
  /** Authenticates the caller and builds its FHIR context. */
  secured: RequestHandler[];
  /** `secured` for a vread, which lets a Binary read in its own content type through. */
  securedRead: RequestHandler[];
  contextOf(req: Request): FhirContext;
  base(req: Request): string;
  search: { defaultCount: number; maxCount: number };
  /** Records a read event; undefined when no audit trail records. */
  auditAccess: ((req: Request, res: Response, access: FhirAccessDetails | undefined) => void) | undefined;
  setVersionHeaders(res: Response, resource: StoredResource): void;
}

function param(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/**
 * Mounts the history routes on the FHIR router: `GET _history`, `GET [type]/_history`,
 * `GET [type]/[id]/_history` (Bundles of type `history`) and `GET [type]/[id]/_history/[vid]`
 * (vread of any kept version; a Binary's in its own content type when asked for in no FHIR
 * format). Mounted before the type and instance routes, whose parameters would take `_history` for
 * a type or an id. Other methods answer 405.
 */
export function mountHistoryRoutes(router: Router, deps: HistoryRouteDeps): void {
  const { guard, secured } = deps;

  const answerHistory = (target: (req: Request) => HistoryTarget): RequestHandler =>
    asyncHandler(async (req, res) => {
      const at = req.originalUrl.indexOf('?');
      const query = at === -1 ? '' : req.originalUrl.slice(at + 1);
      const request = parseHistoryRequest(target(req), new URLSearchParams(query), {
        ...deps.search,
        lenient: parsePrefer(req.headers.prefer).handling === 'lenient',
      });
      // A listing of a type or the project reads as much as a search: a turn of the project.
      const page = await admitted(deps.contextOf(req), (ctx) => readHistoryPage(ctx, deps.storage, request));
      if (deps.auditAccess) {
        // One event per type of patient-compartment data the page holds.
        const byType = new Map<string, StoredResource[]>();
        for (const e of page.entries) {
          if (!e.resource) continue;
          const list = byType.get(e.resourceType) ?? [];
          list.push(e.resource);
          byType.set(e.resourceType, list);
        }
        for (const [type, resources] of byType)
          deps.auditAccess(req, res, searchAccess(type, `_history?${query}`, resources));
      }
      sendFhir(res, 200, buildHistoryBundle(deps.base(req), request, page));
    });

  router
    .route('/_history')
    .get(
      ...secured,
      answerHistory(() => ({})),
    )
    .all(methodNotAllowed('GET'));
  router
    .route('/:type/_history')
    .get(
      guard,
      ...secured,
      answerHistory((req) => ({ type: param(req.params.type) })),
    )
    .all(guard, methodNotAllowed('GET'));
  router
    .route('/:type/:id/_history')
    .get(
      guard,
      ...secured,
      answerHistory((req) => ({ type: param(req.params.type), id: param(req.params.id) })),
    )
    .all(guard, methodNotAllowed('GET'));
  router
    .route('/:type/:id/_history/:vid')
    .get(
      guard,
      ...deps.securedRead,
      asyncHandler(async (req, res) => {
        const resource = await readVersion(
          deps.contextOf(req),
          deps.storage,
          param(req.params.type),
          param(req.params.id),
          param(req.params.vid),
        );
        const native = wantsNativeBinary(req) ? nativeBinaryContent(req, resource) : undefined;
        deps.auditAccess?.(req, res, readAccess('vread', resource));
        deps.setVersionHeaders(res, resource);
        if (native) sendNativeBinary(res, native);
        else sendFhir(res, 200, resource);
      }),
    )
    .all(guard, methodNotAllowed('GET'));
}
