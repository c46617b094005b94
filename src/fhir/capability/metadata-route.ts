import type { Request, Router } from 'express';
import { asyncHandler } from '../../http/async-handler.js';
import { fhirJsonOnly } from '../../http/fhir-format.js';
import { FHIR_JSON, methodNotAllowed, sendFhir } from '../../http/protocol-responses.js';
import { loadSearchRegistry } from '../../search/definitions.js';
import { buildCapabilityStatement, type CapabilityStatementJson } from './capability-statement.js';
import { EVERYTHING_CAPABILITY } from '../everything/everything-route.js';
import type { ResolvedFhirRouterOptions } from '../router-options.js';
import { parseMetadataSubset, subsetStatement } from './metadata-subset.js';
import { TERMINOLOGY_CAPABILITY, VALIDATE_CAPABILITY } from './operation-capabilities.js';

/** Base URLs whose statements are kept (it follows the Host header without `baseUrl`). */
const KEPT_STATEMENTS = 8;

/** What `GET /metadata` needs of the router's options. */
type MetadataConfig = Pick<
  ResolvedFhirRouterOptions,
  'capabilities' | 'conditionalDelete' | 'software' | 'defaultCount' | 'maxCount' | 'searchLimits'
>;

/** A statement built for one base URL, and its JSON text. */
interface KeptStatement {
  statement: CapabilityStatementJson;
  text: string;
}

async function buildFor(config: MetadataConfig, baseUrl: string): Promise<KeptStatement> {
  const statement = buildCapabilityStatement(
    {
      baseUrl,
      contributions: [
        ...config.capabilities,
        EVERYTHING_CAPABILITY,
        VALIDATE_CAPABILITY,
        TERMINOLOGY_CAPABILITY,
      ],
      conditionalDelete: config.conditionalDelete === 'off' ? 'not-supported' : config.conditionalDelete,
      ...(config.software ? { software: config.software } : {}),
      searchLimits: { defaultCount: config.defaultCount, maxCount: config.maxCount, ...config.searchLimits },
    },
    await loadSearchRegistry(),
  );
  return { statement, text: JSON.stringify(statement) };
}

/**
 * Mounts `GET /metadata`, the CapabilityStatement (public, no authentication). The statement (about
 * 900 KB: every search parameter of every type) is built once per base URL, since it takes about
 * 10 ms and anyone may ask for it. `_summary=true` answers its summary elements (about 30 KB),
 * `_summary=text|data|false` and `_elements` as for a read; other values are a 400.
 * @see https://hl7.org/fhir/R4/http.html#capabilities
 */
export function mountMetadata(router: Router, config: MetadataConfig, base: (req: Request) => string): void {
  const statements = new Map<string, KeptStatement>();
  router
    .route('/metadata')
    .get(
      fhirJsonOnly(),
      asyncHandler(async (req, res) => {
        const subset = parseMetadataSubset(new URL(req.originalUrl, 'http://x').searchParams);
        const baseUrl = base(req);
        let kept = statements.get(baseUrl);
        if (kept === undefined) {
          kept = await buildFor(config, baseUrl);
          if (statements.size >= KEPT_STATEMENTS) statements.delete(statements.keys().next().value!);
          statements.set(baseUrl, kept);
        }
        if (subset) sendFhir(res, 200, await subsetStatement(kept.statement, subset));
        else res.status(200).type(FHIR_JSON).send(kept.text);
      }),
    )
    .all(methodNotAllowed('GET'));
}
