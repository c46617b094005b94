import type { Request, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { fhirJsonOnly } from '../../http/fhir-format.js';
import { FHIR_JSON, methodNotAllowed } from '../../http/protocol-responses.js';
import { loadSearchRegistry } from '../../search/definitions.js';
import { buildCapabilityStatement } from './capability-statement.js';
import { EVERYTHING_CAPABILITY } from '../everything/everything-route.js';
import type { ResolvedFhirRouterOptions } from '../router-options.js';

/** Base URLs whose statements are kept (it follows the Host header without `baseUrl`). */
const KEPT_STATEMENTS = 8;

/**
 * Mounts `GET /metadata`, the CapabilityStatement (public, no authentication). The statement (about
 * 500 KB: every search parameter of every type) is built once per base URL, since it takes about
 * 10 ms and anyone may ask for it.
 */
export function mountMetadata(
  router: Router,
  config: Pick<
    ResolvedFhirRouterOptions,
    'capabilities' | 'conditionalDelete' | 'software' | 'defaultCount' | 'maxCount' | 'searchLimits'
  >,
  base: (req: Request) => string,
): void {
  const statements = new Map<string, string>();
  router
    .route('/metadata')
    .get(
      fhirJsonOnly(),
      asyncHandler(async (req, res) => {
        const baseUrl = base(req);
        let text = statements.get(baseUrl);
        if (text === undefined) {
          const statement = buildCapabilityStatement(
            {
              baseUrl,
              contributions: [...config.capabilities, EVERYTHING_CAPABILITY],
              conditionalDelete:
                config.conditionalDelete === 'off' ? 'not-supported' : config.conditionalDelete,
              ...(config.software ? { software: config.software } : {}),
              searchLimits: {
                defaultCount: config.defaultCount,
                maxCount: config.maxCount,
                ...config.searchLimits,
              },
            },
            await loadSearchRegistry(),
          );
          text = JSON.stringify(statement);
          if (statements.size >= KEPT_STATEMENTS) statements.delete(statements.keys().next().value!);
          statements.set(baseUrl, text);
        }
        res.status(200).type(FHIR_JSON).send(text);
      }),
    )
    .all(methodNotAllowed('GET'));
}
