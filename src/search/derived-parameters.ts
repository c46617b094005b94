import type { DerivedParameter } from '../storage/search-index.js';
import type { ExpressionBranch, SearchParameterDefinition, SearchRegistry } from './definitions.js';

/*
 * The R4 parameters whose values are exactly those of other parameters of the same type, found
 * from their expressions (src/storage/search-index.ts, `DerivedParameter`):
 * - a union: its branches are, one for one, the branches of other parameters (Observation
 *   `combo-code` = `code` | `component-code`, `combo-value-quantity` = `value-quantity` |
 *   `component-value-quantity`);
 * - a composite: each branch of its base is either the resource itself, whose components are then
 *   each another parameter's only branch (Observation `code-value-concept`: `code` and
 *   `value-concept`), or the only branch of another composite with the same components
 *   (`combo-code-value-concept` on `Observation.component` is `component-code-value-concept`;
 *   `combo-code-value-quantity` on the Observation itself is `code-value-quantity`).
 * - a reference restricted to a target type: its branches are other reference parameters'
 *   branches with `.where(resolve() is T)`, one type for all (Observation `patient` is `subject`
 *   restricted to Patient), so its values are theirs whose target type is T.
 * Only value kinds whose index rows are alike whatever their parameter qualify: tokens, strings,
 * uris, numbers and quantities, and references restricted to a type. Dates are left out (a date
 * row carries its own parameter's hull, see src/storage/postgres/search-tables.ts).
 * A branch whose every value type the indexer never gives a value of the parameter's type is
 * left out of the comparison: `value-quantity` also reads `valueSampledData`, which has no value,
 * low nor high for a quantity (src/search/extract.ts `quantities`), so `code-value-quantity`,
 * whose component reads `valueQuantity` only, is `code` and `value-quantity` all the same.
 */

const DERIVABLE: ReadonlySet<string> = new Set(['token', 'string', 'uri', 'number', 'quantity']);

/** Per parameter type, the element types that never give a value of it (see above). */
const NO_VALUES: Readonly<Record<string, ReadonlySet<string>>> = { quantity: new Set(['SampledData']) };

/** The branches of `p` that can give values. */
const valuedBranches = (p: SearchParameterDefinition): ExpressionBranch[] =>
  p.branches.filter((b) => !b.valueTypes.every((t) => NO_VALUES[p.type]?.has(t)));

/** An expression in one spelling: no outer parentheses, `x.as(T)` as `x as T`, single spaces. */
function normalize(expression: string): string {
  let text = expression.trim().replace(/\s+/g, ' ');
  while (text.startsWith('(') && text.endsWith(')') && !text.slice(1, -1).includes('('))
    text = text.slice(1, -1).trim();
  return text.replace(/\.as\(([A-Za-z]+)\)$/, ' as $1');
}

/** What makes two branches select the same values (`resolveIs` left out with `unrestricted`). */
const branchKey = (b: ExpressionBranch, unrestricted = false): string =>
  `${normalize(b.expression)}\u0001${unrestricted ? '' : (b.resolveIs ?? '')}\u0001${b.valueTypes.join(',')}`;

/**
 * The codes of `candidates` (widest first: the fewest parts) whose branches together are, one for
 * one, the branches keyed `wanted`; undefined when they are not.
 */
function coveringParts(
  wanted: Set<string>,
  candidates: readonly SearchParameterDefinition[],
): string[] | undefined {
  const parts: string[] = [];
  const sorted = [...candidates].sort(
    (a, b) => b.branches.length - a.branches.length || a.code.localeCompare(b.code),
  );
  for (const part of sorted) {
    const keys = part.branches.map((b) => branchKey(b));
    if (new Set(keys).size !== keys.length || !keys.every((k) => wanted.has(k))) continue;
    for (const k of keys) wanted.delete(k);
    parts.push(part.code);
    if (wanted.size === 0) return parts;
  }
  return undefined;
}

/** The parts whose branches are, one for one, `def`'s; undefined when there are none such. */
function unionParts(
  def: SearchParameterDefinition,
  stored: readonly SearchParameterDefinition[],
): string[] | undefined {
  const wanted = new Set(def.branches.map((b) => branchKey(b)));
  if (wanted.size !== def.branches.length || wanted.size < 2) return undefined;
  return coveringParts(
    wanted,
    stored.filter(
      (p) => p.code !== def.code && p.type === def.type && p.branches.length < def.branches.length,
    ),
  );
}

/**
 * A reference parameter whose every branch is `X.where(resolve() is T)`, one T for all, as the
 * unrestricted reference parameters whose branches are, one for one, those `X`, and T.
 */
function restriction(
  def: SearchParameterDefinition,
  stored: readonly SearchParameterDefinition[],
): { parts: string[]; targetType: string } | undefined {
  const targetType = def.branches[0]?.resolveIs;
  if (def.type !== 'reference' || targetType === undefined) return undefined;
  if (def.branches.some((b) => b.resolveIs !== targetType)) return undefined;
  const wanted = new Set(def.branches.map((b) => branchKey(b, true)));
  if (wanted.size !== def.branches.length) return undefined;
  const parts = coveringParts(
    wanted,
    stored.filter(
      (p) =>
        p.code !== def.code &&
        p.type === 'reference' &&
        p.branches.length <= def.branches.length &&
        p.branches.every((b) => b.resolveIs === undefined),
    ),
  );
  return parts && { parts, targetType };
}

/** The alternatives of a composite `def`; undefined when one of its branches has no equivalent. */
function compositeAlternatives(
  def: SearchParameterDefinition,
  stored: readonly SearchParameterDefinition[],
): ({ and: string[] } | { composite: string })[] | undefined {
  if (def.components.length === 0 || !def.components.every((c) => DERIVABLE.has(c.type))) return undefined;
  const sameComponents = (other: SearchParameterDefinition): boolean =>
    other.components.length === def.components.length &&
    other.components.every(
      (c, i) =>
        c.type === def.components[i]!.type &&
        normalize(c.expression) === normalize(def.components[i]!.expression) &&
        c.valueTypes.join(',') === def.components[i]!.valueTypes.join(','),
    );
  const alternatives: ({ and: string[] } | { composite: string })[] = [];
  for (const branch of def.branches) {
    const base = normalize(branch.expression);
    if (base === def.resourceType) {
      const and = def.components.map((component) => {
        const key = `${def.resourceType}.${normalize(component.expression)}\u0001\u0001${component.valueTypes.join(',')}`;
        return stored.find((p) => {
          const branches = valuedBranches(p);
          return p.type === component.type && branches.length === 1 && branchKey(branches[0]!) === key;
        })?.code;
      });
      if (and.every((code) => code !== undefined)) {
        alternatives.push({ and });
        continue;
      }
      // Else another composite on the resource itself with the same components, as for any base.
    }
    const other = stored.find(
      (p) =>
        p.code !== def.code &&
        p.type === 'composite' &&
        p.branches.length === 1 &&
        branchKey(p.branches[0]!) === branchKey(branch) &&
        sameComponents(p),
    );
    if (!other) return undefined;
    alternatives.push({ composite: other.code });
  }
  return alternatives.length > 0 ? alternatives : undefined;
}

/** The derived parameters of `resourceType` in `registry`, by code (none derived from another derived one). */
export function derivedParameters(
  registry: SearchRegistry,
  resourceType: string,
): Map<string, DerivedParameter> {
  const out = new Map<string, DerivedParameter>();
  const params = registry.parameters(resourceType).filter((p) => p.branches.length > 0);
  // Fewest branches first: a parameter found derived is no part of a wider one.
  const ordered = [...params].sort((a, b) => a.branches.length - b.branches.length);
  const stored = (): SearchParameterDefinition[] => params.filter((p) => !out.has(p.code));
  for (const def of ordered) {
    if (def.code.startsWith('_')) continue;
    if (def.type === 'composite') {
      const alternatives = compositeAlternatives(def, stored());
      if (alternatives) out.set(def.code, { kind: 'composite', alternatives });
    } else if (DERIVABLE.has(def.type)) {
      const parts = unionParts(def, stored());
      if (parts) out.set(def.code, { kind: 'union', parts });
    } else {
      const restricted = restriction(def, stored());
      if (restricted) out.set(def.code, { kind: 'union', ...restricted });
    }
  }
  return out;
}
