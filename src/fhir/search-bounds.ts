import { AUDIT_EVENT_TYPE } from '../audit/codes.js';
import type { SearchCostLimits } from '../search/cost-limits.js';
import { loadSearchRegistry } from '../search/definitions.js';
import { parseSearchRequest } from '../search/parse.js';
import { SearchParameterError } from '../search/search-error.js';
import { AUDIT_EVENT_SEARCH_PARAMS } from './audit-event-search.js';

/**
 * Throws the 400 `too-costly` error (`SearchParameterError`) the search's cost bounds (`limits`)
 * would answer, before the search waits for a turn of its project or reads anything: a search
 * refused outright is refused at once. Any other problem of the parameters is left to
 * `parseSearch`, which reports it in its turn.
 */
export async function refuseTooCostly(
  resourceType: string,
  params: readonly (readonly [string, string])[],
  limits: SearchCostLimits | undefined,
): Promise<void> {
  const registry = await loadSearchRegistry();
  // What parseSearch hands to parseSearchRequest: without `_cursor` and AuditEvent's own parameters.
  const searched = params.filter(([name]) => {
    const code = name.split(':', 1)[0]!;
    if (code === '_cursor') return false;
    return !(resourceType === AUDIT_EVENT_TYPE && AUDIT_EVENT_SEARCH_PARAMS.includes(code));
  });
  try {
    parseSearchRequest(registry, resourceType, searched, {
      lenient: true,
      ...(limits === undefined ? {} : { limits }),
    });
  } catch (error) {
    if (error instanceof SearchParameterError && error.issueCode === 'too-costly') throw error;
  }
}
