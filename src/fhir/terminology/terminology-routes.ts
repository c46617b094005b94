import type { Request, RequestHandler, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { FhirError } from '../../http/http-error.js';
import { methodNotAllowed, sendFhir } from '../../http/protocol-responses.js';
import { isValidId } from '../../common/resource-types.js';
import type { FhirResource } from '../../storage/types.js';
import type { FhirContext } from '../context.js';
import { operationParams, type OperationParams } from './operation-params.js';
import {
  codeSystemValidateCode,
  expandOperation,
  lookupOperation,
  OPERATION_PARAMETERS,
  prepareCall,
  subsumesOperation,
  type TerminologyCall,
  terminologyErrorAsFhir,
  valueSetValidateCode,
} from './terminology-operations.js';

/** What the terminology routes need of the FHIR router. */
export interface TerminologyRouteDeps {
  /** Authentication and the request's FHIR context, run before the handler. */
  secured: RequestHandler[];
  contextOf(req: Request): FhirContext;
  /** A FHIR JSON body (the `Parameters` of a POST). */
  body: RequestHandler;
}

/** An operation: the call (its access checked), and its parameters. */
type Operation = (call: TerminologyCall, params: OperationParams) => Promise<FhirResource>;

interface Mounted {
  type: 'ValueSet' | 'CodeSystem';
  name: string;
  parameters: keyof typeof OPERATION_PARAMETERS;
  run: Operation;
  /** Whether `[type]/[id]/$name` is mounted too. */
  instance: boolean;
}

const OPERATIONS: readonly Mounted[] = [
  { type: 'ValueSet', name: 'expand', parameters: 'expand', run: expandOperation, instance: true },
  {
    type: 'ValueSet',
    name: 'validate-code',
    parameters: 'valueSetValidateCode',
    run: valueSetValidateCode,
    instance: true,
  },
  {
    type: 'CodeSystem',
    name: 'lookup',
    parameters: 'lookup',
    run: lookupOperation,
    instance: false,
  },
  {
    type: 'CodeSystem',
    name: 'validate-code',
    parameters: 'codeSystemValidateCode',
    run: codeSystemValidateCode,
    instance: true,
  },
  { type: 'CodeSystem', name: 'subsumes', parameters: 'subsumes', run: subsumesOperation, instance: true },
];

/** `/{type}/$name` and `/{type}/{id}/$name`, `$` also spelled `%24` (Express reads `$` as an anchor). */
function pathsOf(op: Mounted): { type: RegExp; instance: RegExp } {
  return {
    type: new RegExp(`^\\/${op.type}\\/(?:\\$|%24)${op.name}\\/?$`),
    instance: new RegExp(`^\\/${op.type}\\/([^/]+)\\/(?:\\$|%24)${op.name}\\/?$`),
  };
}

function handler(op: Mounted, instance: boolean, deps: TerminologyRouteDeps): RequestHandler {
  return asyncHandler(async (req, res) => {
    const captures = req.params as unknown as Record<string, string | undefined>;
    const id = instance ? (captures['0'] ?? '') : undefined;
    if (id !== undefined && !isValidId(id))
      throw new FhirError(400, 'invalid', 'The id does not match the FHIR id syntax', { expression: ['id'] });
    // Who may ask comes first: a caller without the right learns nothing of its parameters' fate.
    const call = await prepareCall(deps.contextOf(req), op.type, id);
    const query = new URL(req.originalUrl, 'http://x').searchParams;
    const body = req.method === 'POST' ? (req.body as unknown) : undefined;
    const params = operationParams(`$${op.name}`, query, body, OPERATION_PARAMETERS[op.parameters]);
    let answer: FhirResource;
    try {
      answer = await op.run(call, params);
    } catch (error) {
      throw terminologyErrorAsFhir(error);
    }
    // No audit event: the trail records reads of patient data, which ValueSet and CodeSystem are not.
    sendFhir(res, 200, answer);
  });
}

/**
 * Mounts the terminology operations on `router`, before its `/:type/:id` routes: `GET|POST
 * /ValueSet/$expand`, `/ValueSet/{id}/$expand`, `/ValueSet/$validate-code`,
 * `/ValueSet/{id}/$validate-code`, `/CodeSystem/$lookup`, `/CodeSystem/$validate-code`,
 * `/CodeSystem/{id}/$validate-code`, `/CodeSystem/$subsumes` and `/CodeSystem/{id}/$subsumes`.
 * Parameters come from the query string and, for a POST, a `Parameters` body
 * (`application/fhir+json`). Answers: a `ValueSet` with its `expansion`, or `Parameters`.
 * @see https://hl7.org/fhir/R4/terminology-service.html
 */
export function mountTerminologyRoutes(router: Router, deps: TerminologyRouteDeps): void {
  for (const op of OPERATIONS) {
    const paths = pathsOf(op);
    for (const [path, instance] of [
      [paths.type, false],
      ...(op.instance ? [[paths.instance, true] as const] : []),
    ] as const) {
      router
        .route(path)
        .get(...deps.secured, handler(op, instance, deps))
        .post(...deps.secured, deps.body, handler(op, instance, deps))
        .all(methodNotAllowed('GET, POST'));
    }
  }
}
