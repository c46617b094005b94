import type { OutcomeIssue } from '../../http/outcome.js';
import type { FhirResource } from '../../storage/types.js';
import {
  TerminologyError,
  type Membership,
  type Terminology,
  type TerminologySource,
} from '../../terminology/terminology-types.js';
import type { Binding, BindingTable, BoundField, BoundFields, CodedKind } from './binding-table.js';

type JsonObject = Record<string, unknown>;

/** One code of a coded value, with where it is and what the R4 definitions say of it. */
interface CodeAt {
  readonly system: string | undefined;
  readonly code: string;
  readonly path: string;
  verdict: Membership;
  /** Decided by the project's own code system (not the R4 definitions). */
  byProject?: boolean;
}

/** A coded value under a binding: one code (`code`, `Coding`, `Quantity`) or a CodeableConcept's. */
interface CodedValue {
  readonly binding: Binding;
  readonly concept: boolean;
  readonly path: string;
  readonly codes: CodeAt[];
}

const isObject = (value: unknown): value is JsonObject =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The codes of a coded value of `kind` (none when it carries no code, or is not of its shape). */
function codesOf(value: unknown, kind: CodedKind, path: string): CodeAt[] {
  const coding = (v: unknown, at: string): CodeAt[] => {
    if (!isObject(v) || typeof v.code !== 'string') return [];
    const system = typeof v.system === 'string' ? v.system : undefined;
    return [{ system, code: v.code, path: at, verdict: 'unknown' }];
  };
  switch (kind) {
    case 'code':
      return typeof value === 'string' ? [{ system: undefined, code: value, path, verdict: 'unknown' }] : [];
    case 'Coding':
    case 'Quantity':
      return coding(value, path);
    case 'CodeableConcept': {
      const codings = isObject(value) ? value.coding : undefined;
      if (!Array.isArray(codings)) return [];
      return codings.flatMap((c, i) => coding(c, `${path}.coding[${i}]`));
    }
  }
}

/**
 * Checks the coded values of resources against their bindings in the R4 definitions
 * (`table`), with `terminology.membership`, and the codings of a system the project uploaded
 * (one the R4 definitions do not hold) with `terminology.validateCode` over the project's `source`:
 *
 * - `required`: a code outside the value set is an error (`code-invalid`); for a CodeableConcept,
 *   only when no coding is in it, at least one is of a held system and none is undecided.
 * - `extensible`, `preferred`: a warning under the same conditions, a held system required.
 * - `example`: nothing. A code of a system the server does not hold is never reported.
 *
 * Call `terminology.load()` first. Contained resources and Bundle entries are checked by their
 * own type; the issues' `expression` is FHIRPath from the resource's type.
 * @see https://hl7.org/fhir/R4/terminologies.html#strength
 */
export function createBindingCheck(
  table: BindingTable,
  terminology: Terminology,
): (resource: FhirResource, source?: TerminologySource) => Promise<OutcomeIssue[]> {
  const heldSystem = (c: CodeAt): boolean =>
    c.byProject === true || c.system === undefined || terminology.holdsSystem(c.system);
  /** The project's code systems may decide a code the R4 definitions cannot. */
  const projectMayDecide = (c: CodeAt): boolean =>
    c.verdict === 'unknown' && c.system !== undefined && !terminology.holdsSystem(c.system);

  function collect(object: JsonObject, fields: BoundFields, path: string, out: CodedValue[]): void {
    for (const key in object) {
      const field = fields.get(key);
      if (field === undefined) continue;
      const value = object[key];
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) visit(value[i], field, `${path}.${field.step}[${i}]`, out);
      } else {
        visit(value, field, `${path}.${field.step}`, out);
      }
    }
  }

  function visit(value: unknown, field: BoundField, path: string, out: CodedValue[]): void {
    if (field.binding && field.kind) {
      const codes = codesOf(value, field.kind, path);
      if (codes.length > 0) {
        for (const c of codes) c.verdict = terminology.membership(field.binding.valueSet, c.system, c.code);
        out.push({ binding: field.binding, concept: field.kind === 'CodeableConcept', path, codes });
      }
    }
    if (!isObject(value)) return;
    if (field.walk) collect(value, table.fields(field.walk), path, out);
    else if (field.resource && typeof value.resourceType === 'string') {
      const type = value.resourceType;
      if (table.isResourceType(type)) collect(value, table.fields(type), `${path}.ofType(${type})`, out);
    }
  }

  async function decideByProject(values: CodedValue[], source: TerminologySource): Promise<void> {
    const pending = values
      .flatMap((v) => v.codes.map((c) => ({ v, c })))
      .filter(({ c }) => projectMayDecide(c));
    if (pending.length === 0) return;
    // Only the systems met are looked up (by `url`, cached for the request): a project's other code
    // systems, however large, are not read.
    const held = new Map<string, Promise<boolean>>();
    const projectHolds = (system: string): Promise<boolean> => {
      let answer = held.get(system);
      if (!answer)
        held.set(system, (answer = source.find('CodeSystem', system).then((r) => r !== undefined)));
      return answer;
    };
    for (const { v, c } of pending) {
      if (!(await projectHolds(c.system!))) continue;
      try {
        const answer = await terminology.validateCode(
          'ValueSet',
          { url: v.binding.valueSet, system: c.system!, code: c.code },
          source,
        );
        c.verdict = answer.result ? 'member' : 'not-member';
        c.byProject = true;
      } catch (error) {
        if (!(error instanceof TerminologyError)) throw error; // undecidable here: left unknown
      }
    }
  }

  return async (resource, source) => {
    const type = resource.resourceType;
    if (!table.isResourceType(type)) return [];
    const values: CodedValue[] = [];
    collect(resource, table.fields(type), type, values);
    if (values.length === 0) return [];
    if (source) await decideByProject(values, source);
    const issues: OutcomeIssue[] = [];
    for (const value of values) {
      const issue = issueOf(value, heldSystem);
      if (issue) issues.push(issue);
    }
    return issues;
  };
}

/** The issue of one coded value, if any (see {@link createBindingCheck} for the rules). */
function issueOf(value: CodedValue, heldSystem: (c: CodeAt) => boolean): OutcomeIssue | undefined {
  const { binding, codes } = value;
  if (codes.some((c) => c.verdict !== 'not-member')) return undefined;
  const held = codes.find(heldSystem);
  if (value.concept || binding.strength !== 'required') {
    if (held === undefined) return undefined;
  }
  const culprit = held ?? codes[0]!;
  const error = binding.strength === 'required';
  const what = culprit.system === undefined ? `'${culprit.code}'` : `'${culprit.code}' (${culprit.system})`;
  const text = value.concept
    ? `None of the codes of ${value.path} is in the value set ${binding.valueSet} (${binding.strength} binding); first: ${what}`
    : `The code ${what} is not in the value set ${binding.valueSet} (${binding.strength} binding)`;
  return {
    severity: error ? 'error' : 'warning',
    code: 'code-invalid',
    details: { text },
    expression: [culprit.path],
  };
}
