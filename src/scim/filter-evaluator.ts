/**
 * Schema-aware evaluation of a parsed SCIM filter against resource JSON (RFC 7644 §3.4.2.2).
 *
 * - String comparisons follow each attribute's `caseExact` (RFC 7643 §2.2); attribute names are
 *   case-insensitive.
 * - `dateTime` attributes compare as instants, numbers numerically, booleans by `eq`/`ne` only.
 * - A multi-valued attribute matches when any of its values does; a complex multi-valued attribute
 *   without a sub-attribute compares its `value` sub-attribute.
 * - `ne` is the negation of `eq`, so a user lacking the attribute matches `ne`.
 * - Compilation rejects combinations that make no sense (`gt` on a boolean, a non-date literal
 *   against a `dateTime`) with 400 `invalidFilter`; evaluation itself never throws, whatever the
 *   resource holds.
 * - An attribute the schemas do not define is a 400 `invalidFilter` (a misspelt `userNmae eq "x"`
 *   matching nothing would let a provider's "look up, then create" make duplicates), except in a
 *   search at the server root, where it is an attribute without a value (`undefinedAsAbsent`).
 */
import { ScimError } from '../http/http-error.js';
import {
  printScimAttributePath,
  type ScimAttributePath,
  type ScimCompareOperator,
  type ScimFilter,
  type ScimFilterValue,
} from './filter-parser.js';
import { getOwn, isPlainObject, isPresent } from './json-access.js';
import {
  findSubAttribute,
  resolveAttribute,
  type ScimAttributeDefinition,
  type ScimResourceSchemas,
} from './schema.js';

/** A compiled filter: true when the resource matches. Never throws. */
export type ScimFilterPredicate = (resource: unknown) => boolean;

/** How {@link compileScimFilter} reads a filter. */
export interface ScimFilterOptions {
  /**
   * An attribute the schemas do not define reads as one without a value, instead of a 400
   * `invalidFilter`: a search at the server root spans resource types, and RFC 7644 §3.4.2.1 has
   * the attributes a type lacks treated so (`pr` and `eq` false, `ne` true).
   * @default false
   */
  undefinedAsAbsent?: boolean;
}

/** Where attribute names resolve: the whole resource, or one value of a complex attribute. */
type Scope =
  | { kind: 'resource'; schemas: ScimResourceSchemas; undefinedAsAbsent: boolean }
  | { kind: 'element'; parent: ScimAttributeDefinition };

interface Target {
  /** Reads the candidate values (flattened) from the context object. */
  read: (context: unknown) => unknown[];
  /** The definition the compared values follow. */
  definition: ScimAttributeDefinition;
}

function bad(message: string): ScimError {
  return new ScimError(400, 'invalidFilter', message);
}

function flatten(value: unknown): unknown[] {
  if (value === undefined || value === null) return [];
  return Array.isArray(value) ? value.filter((v) => v !== undefined && v !== null) : [value];
}

function unknownAttribute(path: ScimAttributePath, parent?: ScimAttributeDefinition): ScimError {
  const name = printScimAttributePath(path);
  return bad(`Unknown attribute ${JSON.stringify(parent ? `${parent.name}.${name}` : name)}`);
}

/**
 * Resolves a path in a scope to a reader and the definition of the values it yields; 400
 * `invalidFilter` when the schemas do not define it.
 */
function resolveTarget(scope: Scope, path: ScimAttributePath): Target {
  if (scope.kind === 'element') {
    const sub = findSubAttribute(scope.parent, path.attribute);
    if (!sub) throw unknownAttribute(path, scope.parent);
    return { definition: sub, read: (element) => flatten(getOwn(element, sub.name)) };
  }
  const resolved = resolveAttribute(scope.schemas, path);
  if (!resolved) throw unknownAttribute(path);
  const { definition, extension, subAttribute } = resolved;
  const readAttribute = (resource: unknown): unknown[] =>
    flatten(getOwn(extension ? getOwn(resource, extension) : resource, definition.name));
  if (subAttribute) {
    return {
      definition: subAttribute,
      read: (resource) =>
        readAttribute(resource).flatMap((element) => flatten(getOwn(element, subAttribute.name))),
    };
  }
  return { definition, read: readAttribute };
}

/** For comparisons: a complex attribute without a sub-attribute compares its `value`. */
function comparableTarget(target: Target): Target | undefined {
  if (target.definition.type !== 'complex') return target;
  const valueSub = findSubAttribute(target.definition, 'value');
  if (!valueSub) return undefined;
  return {
    definition: valueSub,
    read: (context) => target.read(context).flatMap((element) => flatten(getOwn(element, valueSub.name))),
  };
}

function parseInstant(value: unknown): number | undefined {
  if (typeof value !== 'string' || !/^\d{4}-\d{2}-\d{2}/.test(value)) return undefined;
  const time = Date.parse(value);
  return Number.isNaN(time) ? undefined : time;
}

function order(operator: ScimCompareOperator, cmp: number): boolean {
  switch (operator) {
    case 'gt':
      return cmp > 0;
    case 'ge':
      return cmp >= 0;
    case 'lt':
      return cmp < 0;
    case 'le':
      return cmp <= 0;
    default:
      return cmp === 0;
  }
}

/** Builds the test one value must pass, for a non-null literal; `ne` is handled by the caller. */
function valueTest(
  definition: ScimAttributeDefinition,
  operator: ScimCompareOperator,
  literal: Exclude<ScimFilterValue, null>,
): (value: unknown) => boolean {
  const op = operator === 'ne' ? 'eq' : operator;
  switch (definition.type) {
    case 'boolean': {
      if (op !== 'eq') throw bad(`Operator ${operator} does not apply to boolean ${definition.name}`);
      let expected: boolean;
      if (typeof literal === 'boolean') expected = literal;
      else if (typeof literal === 'string' && /^(true|false)$/i.test(literal))
        expected = literal.toLowerCase() === 'true';
      else throw bad(`${definition.name} compares with true or false`);
      return (value) =>
        typeof value === 'string' ? value.toLowerCase() === String(expected) : value === expected;
    }
    case 'integer':
    case 'decimal': {
      if (op === 'co' || op === 'sw' || op === 'ew')
        throw bad(`Operator ${operator} does not apply to number ${definition.name}`);
      const expected = typeof literal === 'number' ? literal : Number(literal);
      if (typeof literal === 'boolean' || !Number.isFinite(expected))
        throw bad(`${definition.name} compares with a number`);
      return (value) => typeof value === 'number' && order(op, value - expected);
    }
    case 'dateTime': {
      if (op === 'co' || op === 'sw' || op === 'ew') {
        if (typeof literal !== 'string') throw bad(`${definition.name} compares with a string`);
        return stringTest(op, literal, true);
      }
      const expected = parseInstant(literal);
      if (expected === undefined) throw bad(`${definition.name} compares with a dateTime`);
      return (value) => {
        const time = parseInstant(value);
        return time !== undefined && order(op, time - expected);
      };
    }
    case 'complex':
      throw bad(`${definition.name} is complex: compare one of its sub-attributes`);
    default: {
      if (typeof literal === 'boolean') throw bad(`${definition.name} compares with a string`);
      return stringTest(op, String(literal), definition.caseExact);
    }
  }
}

function stringTest(
  op: ScimCompareOperator,
  literal: string,
  caseExact: boolean,
): (value: unknown) => boolean {
  const fold = caseExact ? (s: string) => s : (s: string) => s.toLowerCase();
  const expected = fold(literal);
  return (value) => {
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') return false;
    const actual = fold(String(value));
    switch (op) {
      case 'co':
        return actual.includes(expected);
      case 'sw':
        return actual.startsWith(expected);
      case 'ew':
        return actual.endsWith(expected);
      case 'eq':
        return actual === expected;
      default:
        return order(op, actual < expected ? -1 : actual > expected ? 1 : 0);
    }
  };
}

/** Whether `path` names an attribute the schemas lack, read as absent (`undefinedAsAbsent`). */
function isAbsent(scope: Scope, path: ScimAttributePath): boolean {
  return scope.kind === 'resource' && scope.undefinedAsAbsent && !resolveAttribute(scope.schemas, path);
}

/** A comparison with an attribute no resource has: true for `ne` a value and `eq null` only. */
function absentComparison(filter: Extract<ScimFilter, { type: 'compare' }>): ScimFilterPredicate {
  const { operator, value } = filter;
  if (value === null && operator !== 'eq' && operator !== 'ne')
    throw bad(`Operator ${operator} does not apply to null`);
  const matches = value === null ? operator === 'eq' : operator === 'ne';
  return () => matches;
}

function compile(filter: ScimFilter, scope: Scope): ScimFilterPredicate {
  switch (filter.type) {
    case 'and': {
      const left = compile(filter.left, scope);
      const right = compile(filter.right, scope);
      return (r) => left(r) && right(r);
    }
    case 'or': {
      const left = compile(filter.left, scope);
      const right = compile(filter.right, scope);
      return (r) => left(r) || right(r);
    }
    case 'not': {
      const inner = compile(filter.filter, scope);
      return (r) => !inner(r);
    }
    case 'present': {
      if (isAbsent(scope, filter.path)) return () => false;
      const target = resolveTarget(scope, filter.path);
      return (r) => target.read(r).some(isPresent);
    }
    case 'valuePath': {
      if (scope.kind !== 'resource') throw bad('Value paths cannot be nested');
      if (isAbsent(scope, filter.path)) return () => false;
      const target = resolveTarget(scope, filter.path);
      if (target.definition.type !== 'complex') throw bad(`${target.definition.name} is not complex`);
      const inner = compile(filter.filter, { kind: 'element', parent: target.definition });
      return (r) => target.read(r).some((element) => isPlainObject(element) && inner(element));
    }
    case 'compare': {
      if (isAbsent(scope, filter.path)) return absentComparison(filter);
      const found = resolveTarget(scope, filter.path);
      const target = comparableTarget(found);
      if (!target) throw bad(`${found.definition.name} is complex: compare one of its sub-attributes`);
      const { operator, value } = filter;
      if (value === null) {
        if (operator !== 'eq' && operator !== 'ne') throw bad(`Operator ${operator} does not apply to null`);
        const present = (r: unknown) => target.read(r).some(isPresent);
        return operator === 'eq' ? (r) => !present(r) : present;
      }
      const test = valueTest(target.definition, operator, value);
      const any = (r: unknown) => target.read(r).some(test);
      return operator === 'ne' ? (r) => !any(r) : any;
    }
  }
}

/**
 * Compiles a filter against a resource type's schemas. Throws `ScimError(400, 'invalidFilter')`
 * for an attribute the schemas do not define (unless `undefinedAsAbsent`) and for comparisons the
 * attribute types do not support; the returned predicate never throws.
 */
export function compileScimFilter(
  filter: ScimFilter,
  schemas: ScimResourceSchemas,
  options: ScimFilterOptions = {},
): ScimFilterPredicate {
  const undefinedAsAbsent = options.undefinedAsAbsent === true;
  const predicate = compile(filter, { kind: 'resource', schemas, undefinedAsAbsent });
  return (resource) => {
    try {
      return predicate(resource);
    } catch {
      return false;
    }
  };
}

/** One-shot `compileScimFilter(filter, schemas)(resource)`. */
export function matchesScimFilter(
  filter: ScimFilter,
  resource: unknown,
  schemas: ScimResourceSchemas,
): boolean {
  return compileScimFilter(filter, schemas)(resource);
}

/** An index lookup the storage can answer (`userName` case-insensitively, the others exactly). */
export interface ScimLookup {
  attribute: 'id' | 'userName' | 'externalId';
  value: string;
}

const INDEXED: ReadonlyMap<string, ScimLookup['attribute']> = new Map([
  ['id', 'id'],
  ['username', 'userName'],
  ['externalid', 'externalId'],
]);

/**
 * Finds index lookups whose union holds every resource the filter can match: `userName eq "x"`,
 * `externalId eq "x"` or `id eq "x"` (qualified or not), on one side of an `and`, or on both sides
 * of an `or`. Undefined when the filter needs a full scan. Callers still apply the whole filter
 * to the candidates.
 */
export function planScimLookup(filter: ScimFilter, coreSchemaId: string): ScimLookup[] | undefined {
  switch (filter.type) {
    case 'compare': {
      const { path, operator, value } = filter;
      if (operator !== 'eq' || typeof value !== 'string' || path.subAttribute !== undefined) return undefined;
      if (path.schema !== undefined && path.schema.toLowerCase() !== coreSchemaId.toLowerCase())
        return undefined;
      const attribute = INDEXED.get(path.attribute.toLowerCase());
      return attribute ? [{ attribute, value }] : undefined;
    }
    case 'and':
      return planScimLookup(filter.left, coreSchemaId) ?? planScimLookup(filter.right, coreSchemaId);
    case 'or': {
      const left = planScimLookup(filter.left, coreSchemaId);
      const right = left && planScimLookup(filter.right, coreSchemaId);
      return left && right ? [...left, ...right] : undefined;
    }
    default:
      return undefined;
  }
}
