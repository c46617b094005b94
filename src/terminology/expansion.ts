import type { FhirResource } from '../storage/types.js';
import { findConcept, type CodeSystemIndex, type Concept } from './code-system-index.js';
import { filterConcepts } from './compose-filters.js';
import type { ComposePart, TerminologyResolver } from './terminology-scope.js';
import { TerminologyError, type SystemCode } from './terminology-types.js';
import { splitCanonical } from './version-order.js';

/*
 * The codes of a value set from its `compose` (or its stored `expansion` when it has no compose):
 * includes (a system's codes, listed or filtered, intersected with the nested value sets given),
 * less the excludes.
 * @see https://hl7.org/fhir/R4/valueset.html#compositions
 */

/** The codes of a value set and what could not be enumerated. */
export interface ComposeResult {
  /** The codes, each `system|code` once, in include order. */
  codes: SystemCode[];
  /** Systems included wholly or by filter that this server does not hold (lenient mode only). */
  openSystems: Set<string>;
  /** True when some part could not be read at all (an unknown nested value set; lenient mode only). */
  openAny: boolean;
  /** `system|version` of every code system read. */
  usedSystems: Set<string>;
}

export interface ComposeOptions {
  /**
   * Lenient: a part that cannot be enumerated (a system not held, an unknown value set) is noted
   * in `openSystems`/`openAny` instead of failing (what a membership check needs).
   */
  lenient: boolean;
  /** More codes than this: `too-costly`. */
  limit: number;
}

type CodeMap = Map<string, SystemCode>;

interface Run extends ComposeOptions {
  resolver: TerminologyResolver;
  /** The value sets being expanded, to detect a cycle. */
  visiting: string[];
  result: ComposeResult;
}

/** The codes of `valueSet`. */
export function expandCompose(
  valueSet: FhirResource,
  resolver: TerminologyResolver,
  options: ComposeOptions,
): ComposeResult {
  const result: ComposeResult = { codes: [], openSystems: new Set(), openAny: false, usedSystems: new Set() };
  const run: Run = { ...options, resolver, visiting: [], result };
  result.codes = [...valueSetCodes(valueSet, run).values()];
  return result;
}

function valueSetCodes(valueSet: FhirResource, run: Run): CodeMap {
  const key = `${String(valueSet.url)}|${String(valueSet.version)}`;
  if (run.visiting.includes(key)) {
    throw new TerminologyError('invalid', `The value set ${String(valueSet.url)} includes itself (a cycle)`);
  }
  run.visiting.push(key);
  try {
    const compose = valueSet.compose as
      { include?: ComposePart[]; exclude?: ComposePart[]; inactive?: boolean } | undefined;
    if (!compose) return storedExpansion(valueSet);
    const codes: CodeMap = new Map();
    for (const part of compose.include ?? []) {
      for (const [key, code] of partCodes(part, run)) codes.set(key, code);
      if (codes.size > run.limit) throw tooCostly(valueSet, run.limit);
    }
    for (const part of compose.exclude ?? []) {
      for (const key of partCodes(part, run).keys()) codes.delete(key);
    }
    if (compose.inactive === false) for (const [key, code] of codes) if (code.inactive) codes.delete(key);
    return codes;
  } finally {
    run.visiting.pop();
  }
}

function tooCostly(valueSet: FhirResource, limit: number): TerminologyError {
  return new TerminologyError(
    'too-costly',
    `The expansion of ${String(valueSet.url)} has more than ${limit} codes: ask for a page (count)`,
  );
}

/** The codes of one include or exclude. */
function partCodes(part: ComposePart, run: Run): CodeMap {
  const fromSystem = part.system === undefined ? undefined : systemCodes(part, part.system, run);
  let codes: CodeMap | undefined = fromSystem;
  for (const reference of part.valueSet ?? []) {
    const nested = nestedCodes(reference, run);
    codes = codes === undefined ? nested : intersect(codes, nested);
  }
  return codes ?? new Map<string, SystemCode>();
}

function intersect(left: CodeMap, right: CodeMap): CodeMap {
  return new Map<string, SystemCode>([...left].filter(([key]) => right.has(key)));
}

function nestedCodes(reference: string, run: Run): CodeMap {
  const { url, version } = splitCanonical(reference);
  const valueSet = run.resolver.valueSet(url, version);
  if (valueSet) return valueSetCodes(valueSet, run);
  if (!run.lenient) throw new TerminologyError('not-found', `The value set ${reference} is unknown`);
  run.result.openAny = true;
  return new Map();
}

/** The codes a part takes from its system: listed, filtered, or all of them. */
function systemCodes(part: ComposePart, url: string, run: Run): CodeMap {
  const system = run.resolver.codeSystem(url, part.version);
  if (system) run.result.usedSystems.add(`${url}|${system.version ?? ''}`);
  if (part.concept) return listedCodes(part, url, system, run);
  if (!system?.held) return openPart(url, part.version, system, run);
  const concepts = part.filter?.length ? filterConcepts(system, part.filter) : [...system.concepts.values()];
  return toCodeMap(concepts.map((concept) => toSystemCode(system, concept)));
}

/** A part over a system not held: refused, or noted in lenient mode. */
function openPart(
  url: string,
  version: string | undefined,
  system: CodeSystemIndex | undefined,
  run: Run,
): CodeMap {
  if (run.lenient) {
    run.result.openSystems.add(url);
    return new Map();
  }
  const what = version === undefined ? url : `${url}|${version}`;
  const why = system ? `its content is '${system.content}'` : 'it is unknown here';
  throw new TerminologyError('not-supported', `The code system ${what} cannot be expanded: ${why}`);
}

/**
 * Listed concepts: checked against the system when it is held (a code it lacks is an error, or
 * left out in lenient mode); taken as listed otherwise.
 */
function listedCodes(part: ComposePart, url: string, system: CodeSystemIndex | undefined, run: Run): CodeMap {
  const codes: SystemCode[] = [];
  for (const listed of part.concept ?? []) {
    if (typeof listed.code !== 'string') continue;
    const concept = system?.held ? findConcept(system, listed.code) : undefined;
    if (concept && system) {
      codes.push({
        ...toSystemCode(system, concept),
        ...(listed.display ? { display: listed.display } : {}),
      });
    } else if (system?.held) {
      if (!run.lenient) {
        throw new TerminologyError('invalid', `The code '${listed.code}' is not in the code system ${url}`);
      }
    } else {
      const version = part.version ?? system?.version;
      codes.push({ system: url, code: listed.code, ...(version ? { version } : {}), ...displayOf(listed) });
    }
  }
  return toCodeMap(codes);
}

function displayOf(listed: { display?: string }): { display?: string } {
  return typeof listed.display === 'string' ? { display: listed.display } : {};
}

/** The expansion entry of `concept` of `system`. */
export function toSystemCode(system: CodeSystemIndex, concept: Concept): SystemCode {
  return {
    system: system.url,
    ...(system.version === undefined ? {} : { version: system.version }),
    code: concept.code,
    ...(concept.display === undefined ? {} : { display: concept.display }),
    ...(concept.inactive ? { inactive: true } : {}),
    ...(concept.abstract ? { abstract: true } : {}),
  };
}

function toCodeMap(codes: readonly SystemCode[]): CodeMap {
  return new Map(codes.map((code) => [`${code.system}|${code.code}`, code]));
}

interface Contains {
  system?: string;
  version?: string;
  code?: string;
  display?: string;
  inactive?: boolean;
  abstract?: boolean;
  contains?: Contains[];
}

/** The codes of a value set's own `expansion` (nested `contains` flattened). */
function storedExpansion(valueSet: FhirResource): CodeMap {
  const codes: SystemCode[] = [];
  const walk = (entries: readonly Contains[] | undefined): void => {
    for (const entry of entries ?? []) {
      if (typeof entry.system === 'string' && typeof entry.code === 'string') {
        const { contains, ...code } = entry;
        void contains;
        codes.push(code as SystemCode);
      }
      walk(entry.contains);
    }
  };
  walk((valueSet.expansion as { contains?: Contains[] } | undefined)?.contains);
  return toCodeMap(codes);
}
