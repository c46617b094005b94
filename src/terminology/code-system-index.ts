import type { FhirResource } from '../storage/types.js';

/*
 * The index of one CodeSystem: each concept by code with what expansion, lookup and validation
 * read (display, designations, properties, status, links up and down), built once from the
 * resource and kept instead of it (the long `definition` texts are left out).
 * @see https://hl7.org/fhir/R4/codesystem.html
 */

/** A designation of a concept (another language or use of its display). */
export interface Designation {
  language?: string;
  use?: { system?: string; code?: string; display?: string };
  value: string;
}

/** A property value of a concept: its code, its `value[x]` key and the value. */
export interface ConceptProperty {
  code: string;
  /** The `value[x]` name (`valueCode`, `valueBoolean`, `valueCoding`…). */
  key: string;
  value: unknown;
}

/** One concept of a code system. */
export interface Concept {
  code: string;
  display?: string;
  designations?: Designation[];
  properties?: ConceptProperty[];
  /** Inactive by its `inactive` property, its `status` (retired, deprecated, inactive) or `deprecated`. */
  inactive: boolean;
  /** Not selectable (`notSelectable` or `abstract` property true). */
  abstract: boolean;
  /** Codes of its parents: the enclosing concept, and `parent`/`subsumedBy` properties. */
  parents: string[];
  /** Codes of its children: nested concepts, and `child` properties. */
  children: string[];
}

/** A code system's index. */
export interface CodeSystemIndex {
  url: string;
  version?: string;
  name?: string;
  caseSensitive: boolean;
  /** `content` (`complete`, `not-present`, `example`, `fragment`, `supplement`). */
  content: string;
  /** True when every code is here (`content` complete): the system is "held". */
  held: boolean;
  /** True when parent/child links mean subsumption (`hierarchyMeaning` is-a or absent). */
  isA: boolean;
  /** Every concept by code, in the order of the resource. */
  concepts: Map<string, Concept>;
  /** Lowercased code to code, for a case-insensitive system only. */
  folded?: Map<string, string>;
  /** The resource's `meta.versionId` (a project resource; caches key on it). */
  versionId?: string;
}

interface RawConcept {
  code?: unknown;
  display?: unknown;
  designation?: unknown;
  property?: unknown;
  concept?: unknown;
}

const INACTIVE_STATUS = new Set(['retired', 'deprecated', 'inactive']);

/** Builds the index of `resource` (a CodeSystem). */
export function indexCodeSystem(resource: FhirResource): CodeSystemIndex {
  const content = typeof resource.content === 'string' ? resource.content : 'complete';
  const index: CodeSystemIndex = {
    url: typeof resource.url === 'string' ? resource.url : '',
    ...(typeof resource.version === 'string' ? { version: resource.version } : {}),
    ...(typeof resource.name === 'string' ? { name: resource.name } : {}),
    caseSensitive: resource.caseSensitive !== false,
    content,
    held: content === 'complete',
    isA: resource.hierarchyMeaning === undefined || resource.hierarchyMeaning === 'is-a',
    concepts: new Map(),
    ...(typeof resource.meta?.versionId === 'string' ? { versionId: resource.meta.versionId } : {}),
  };
  addConcepts(index, asArray(resource.concept), undefined);
  linkBothWays(index);
  if (!index.caseSensitive) {
    index.folded = new Map([...index.concepts.keys()].map((code) => [code.toLowerCase(), code]));
  }
  return index;
}

function addConcepts(index: CodeSystemIndex, raw: RawConcept[], parent: string | undefined): void {
  for (const item of raw) {
    if (typeof item.code !== 'string') continue;
    const concept = index.concepts.get(item.code) ?? toConcept(item);
    index.concepts.set(concept.code, concept);
    if (parent !== undefined) addLink(concept.parents, parent);
    addConcepts(index, asArray(item.concept), concept.code);
  }
}

function toConcept(item: RawConcept): Concept {
  const properties = asArray(item.property).flatMap(toProperty);
  const designations = (Array.isArray(item.designation) ? (item.designation as unknown[]) : []).filter(
    (d): d is Designation => typeof (d as { value?: unknown } | null)?.value === 'string',
  );
  const concept: Concept = {
    code: item.code as string,
    ...(typeof item.display === 'string' ? { display: item.display } : {}),
    ...(designations.length > 0 ? { designations } : {}),
    ...(properties.length > 0 ? { properties } : {}),
    inactive: properties.some(isInactiveProperty),
    abstract: properties.some(
      (p) => (p.code === 'notSelectable' || p.code === 'abstract') && p.value === true,
    ),
    parents: [],
    children: [],
  };
  for (const p of properties) {
    if (typeof p.value !== 'string') continue;
    if (p.code === 'parent' || p.code === 'subsumedBy') addLink(concept.parents, p.value);
    if (p.code === 'child') addLink(concept.children, p.value);
  }
  return concept;
}

function toProperty(raw: unknown): ConceptProperty[] {
  const entry = raw as Record<string, unknown>;
  if (typeof entry.code !== 'string') return [];
  const key = Object.keys(entry).find((k) => k.startsWith('value'));
  return key ? [{ code: entry.code, key, value: entry[key] }] : [];
}

function isInactiveProperty(p: ConceptProperty): boolean {
  if (p.code === 'inactive') return p.value === true;
  if (p.code === 'status') return typeof p.value === 'string' && INACTIVE_STATUS.has(p.value);
  if (p.code === 'deprecated') return p.value !== false;
  return false;
}

/** Makes every parent link a child link the other way, and the reverse. */
function linkBothWays(index: CodeSystemIndex): void {
  for (const concept of index.concepts.values()) {
    for (const parent of concept.parents) {
      const up = index.concepts.get(parent);
      if (up) addLink(up.children, concept.code);
    }
    for (const child of concept.children) {
      const down = index.concepts.get(child);
      if (down) addLink(down.parents, concept.code);
    }
  }
}

function addLink(list: string[], code: string): void {
  if (!list.includes(code)) list.push(code);
}

function asArray(value: unknown): RawConcept[] {
  return Array.isArray(value) ? (value as RawConcept[]) : [];
}

/** The concept of `code`, matched without case in a case-insensitive system. */
export function findConcept(index: CodeSystemIndex, code: string): Concept | undefined {
  const exact = index.concepts.get(code);
  if (exact || !index.folded) return exact;
  const folded = index.folded.get(code.toLowerCase());
  return folded === undefined ? undefined : index.concepts.get(folded);
}

/**
 * `code` and every concept below it (`direction` down: children) or above it (up: parents), in
 * breadth-first order; cycles in the data are walked once. Stops past `limit` codes (answers
 * `limit + 1` of them then, for the caller to refuse).
 */
export function closure(
  index: CodeSystemIndex,
  code: string,
  direction: 'down' | 'up',
  limit = Number.POSITIVE_INFINITY,
): string[] {
  const seen = new Set<string>([code]);
  const order = [code];
  for (let i = 0; i < order.length && order.length <= limit; i++) {
    const concept = index.concepts.get(order[i]!);
    for (const next of (direction === 'down' ? concept?.children : concept?.parents) ?? []) {
      if (seen.has(next) || !index.concepts.has(next)) continue;
      seen.add(next);
      order.push(next);
    }
  }
  return order.slice(0, limit + 1);
}

/** The string form of a property value (a Coding's code), for `=`, `in` and `regex` filters. */
export function propertyText(property: ConceptProperty): string {
  const value = property.value;
  if (value !== null && typeof value === 'object') {
    const code = (value as { code?: unknown }).code;
    return typeof code === 'string' ? code : '';
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}
