import { r4Terminology } from '../../src/terminology/r4-terminology.js';
import type { Terminology } from '../../src/terminology/terminology-types.js';

/**
 * The real R4 terminology service, loaded, counting its `validateCode` calls: binding-check tests
 * assert that codings of R4 systems never reach the (async, project-reading) path.
 */
export async function countingTerminology(): Promise<Terminology & { validateCodeCalls: number }> {
  const service = r4Terminology();
  await service.load();
  const counted: Terminology & { validateCodeCalls: number } = {
    ...service,
    validateCodeCalls: 0,
    validateCode(target, request, source) {
      counted.validateCodeCalls += 1;
      return service.validateCode(target, request, source);
    },
  };
  return counted;
}
