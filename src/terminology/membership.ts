import { expandCompose } from './expansion.js';
import { r4Entry, type R4Definitions } from './r4-definitions.js';
import { r4Resolver } from './terminology-scope.js';
import { TerminologyError, type Membership } from './terminology-types.js';
import { splitCanonical } from './version-order.js';

/** The codes of one R4 value set, as sets for a hash lookup. */
interface MemberSets {
  /** `system|code` of every code. */
  members: Set<string>;
  /** Every code, whatever its system (a FHIR `code` element has no system). */
  codes: Set<string>;
  /** Systems included wholly or by filter that are not held: nothing can be said of their codes. */
  openSystems: Set<string>;
  /** Some part could not be read: nothing can be said of a code outside the members. */
  openAny: boolean;
}

/**
 * The binding check of validation over the R4 value sets: each value set's codes are enumerated
 * the first time it is asked and kept as sets (the R4 value sets are a fixed, small universe: 1,300
 * of them, the largest 6,400 codes), so that each later answer is a hash lookup.
 */
export class R4Membership {
  private readonly sets = new Map<string, MemberSets | null>();

  constructor(private readonly r4: R4Definitions) {}

  answer(valueSetUrl: string, system: string | undefined, code: string): Membership {
    let sets = this.sets.get(valueSetUrl);
    if (sets === undefined) {
      sets = this.compute(valueSetUrl);
      this.sets.set(valueSetUrl, sets);
    }
    if (!sets) return 'unknown';
    if (system === undefined) {
      if (sets.codes.has(code)) return 'member';
      return sets.openAny || sets.openSystems.size > 0 ? 'unknown' : 'not-member';
    }
    if (sets.members.has(`${system}|${code}`)) return 'member';
    return sets.openAny || sets.openSystems.has(system) ? 'unknown' : 'not-member';
  }

  private compute(reference: string): MemberSets | null {
    const { url, version } = splitCanonical(reference);
    // Bindings name R4 value sets with the FHIR version (`|4.0.1`); any other is read as the one held.
    const valueSet = r4Entry(this.r4.valueSets, url, version) ?? r4Entry(this.r4.valueSets, url);
    if (!valueSet) return null;
    try {
      const result = expandCompose(valueSet, r4Resolver(this.r4), { lenient: true, limit: 100_000 });
      return {
        members: new Set(result.codes.map((c) => `${c.system}|${c.code}`)),
        codes: new Set(result.codes.map((c) => c.code)),
        openSystems: result.openSystems,
        openAny: result.openAny,
      };
    } catch (error) {
      if (error instanceof TerminologyError) return null;
      throw error;
    }
  }
}
