import {
  TerminologyError,
  type SystemCode,
  type Terminology,
  type TerminologySource,
} from '../../src/terminology/terminology-types.js';

/** What a {@link fakeTerminology} knows: value sets as explicit code lists, code systems as parent links. */
export interface FakeTerminologyData {
  /** Value set URL (a `|version` included when asked so) → its codes. */
  valueSets: Record<string, readonly SystemCode[]>;
  /** Code system URL → code → the codes it is directly `is-a` of (its parents). */
  systems: Record<string, Record<string, readonly string[]>>;
}

/** The calls a {@link fakeTerminology} was asked, with the source it was given. */
export interface FakeCall {
  method: 'valueSetCodes' | 'hierarchy';
  args: unknown[];
  source: TerminologySource | undefined;
}

/**
 * A small {@link Terminology} over explicit data, for tests of what uses the contract (the search
 * modifiers' resolution) apart from the engine: `valueSetCodes` and `hierarchy` only, with the
 * contract's errors (`not-found`, `invalid`, `too-costly`); every other method throws.
 */
export function fakeTerminology(data: FakeTerminologyData): Terminology & { calls: FakeCall[] } {
  const calls: FakeCall[] = [];
  const unsupported = (): never => {
    throw new TerminologyError('not-supported', 'Not in the fake terminology');
  };
  const bounded = (codes: readonly SystemCode[], limit: number): readonly SystemCode[] => {
    if (codes.length > limit) throw new TerminologyError('too-costly', `More than ${limit} codes`);
    return codes;
  };
  return {
    calls,
    load: () => Promise.resolve(),
    valueSetCodes: (url, limit, source) =>
      settled(() => {
        calls.push({ method: 'valueSetCodes', args: [url, limit], source });
        const codes = data.valueSets[url];
        if (!codes) throw new TerminologyError('not-found', `Unknown value set ${url}`);
        return bounded(codes, limit);
      }),
    hierarchy: (system, code, direction, limit, source) =>
      settled(() => {
        calls.push({ method: 'hierarchy', args: [system, code, direction, limit], source });
        const parents = data.systems[system];
        if (!parents) throw new TerminologyError('not-found', `Unknown code system ${system}`);
        if (!Object.hasOwn(parents, code)) throw new TerminologyError('invalid', `Unknown code ${code}`);
        const found = direction === 'above' ? ancestors(parents, code) : descendants(parents, code);
        return bounded(
          [...found].sort().map((c) => ({ system, code: c })),
          limit,
        );
      }),
    expand: unsupported,
    lookup: unsupported,
    validateCode: unsupported,
    subsumes: unsupported,
    membership: () => 'unknown',
    holdsSystem: (url) => Object.hasOwn(data.systems, url),
  };
}

/** What `fn` answers, as a promise (rejected with what it throws). */
const settled = <T>(fn: () => T): Promise<T> => new Promise((resolve) => resolve(fn()));

/** `code` and every code above it. */
function ancestors(parents: Record<string, readonly string[]>, code: string): Set<string> {
  const out = new Set([code]);
  const queue = [code];
  for (let next = queue.pop(); next !== undefined; next = queue.pop()) {
    for (const parent of parents[next] ?? []) {
      if (out.has(parent)) continue;
      out.add(parent);
      queue.push(parent);
    }
  }
  return out;
}

/** `code` and every code below it. */
function descendants(parents: Record<string, readonly string[]>, code: string): Set<string> {
  const out = new Set([code]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [child, ps] of Object.entries(parents)) {
      if (!out.has(child) && ps.some((p) => out.has(p))) {
        out.add(child);
        grew = true;
      }
    }
  }
  return out;
}
