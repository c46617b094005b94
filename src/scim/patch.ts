/**
 * The SCIM PATCH engine (RFC 7644 §3.5.2) on canonical resource JSON.
 *
 * - Atomic: operations apply to a private copy, returned only when every operation succeeded.
 * - Operation names are case-insensitive (Entra sends `Add`, `Replace`, `Remove`).
 * - Values are normalized with the schema: `"True"`/`"False"` become booleans, a primitive given
 *   for `manager` becomes `{ value }`.
 * - Path-less `add`/`replace` take an object whose keys are attribute paths, including dotted
 *   (`name.givenName`) and URN-qualified ones, or an extension URN with an object.
 * - A value-path `add` or `replace` whose filter is a conjunction of `eq` comparisons and matches
 *   nothing creates the entry (`emails[type eq "work"].value`), as Entra and Okta expect.
 * - `remove` without a path is `noTarget`; an unknown or malformed path is `invalidPath`; touching
 *   a readOnly attribute, or changing an immutable one, is `mutability`. `__proto__`,
 *   `constructor` and `prototype` in a path or a value key are rejected before anything applies.
 */
import { ScimError, type ScimType } from '../http/http-error.js';
import { parseScimPath, type ScimFilter, type ScimPatchPath } from './filter-parser.js';
import { compileScimFilter } from './filter-evaluator.js';
import {
  canonicalJson,
  FORBIDDEN_KEYS,
  findKey,
  hasForbiddenKey,
  isPlainObject,
  setOwn,
} from './json-access.js';
import { normalizeAttributeValue, normalizeElement } from './normalize.js';
import {
  findSchema,
  findSubAttribute,
  PATCH_OP_SCHEMA_ID,
  resolveAttribute,
  USER_RESOURCE_SCHEMAS,
  type ResolvedAttribute,
  type ScimAttributeDefinition,
  type ScimResourceSchemas,
} from './schema.js';

/** One PATCH operation as sent by a client. */
export interface ScimPatchOperation {
  op: string;
  path?: string;
  value?: unknown;
}

/** A PatchOp request body (RFC 7644 §3.5.2). */
export interface ScimPatchRequest {
  schemas: string[];
  Operations: ScimPatchOperation[];
}

export interface ApplyScimPatchOptions {
  /** The resource type's schemas. @default the User schemas */
  schemas?: ScimResourceSchemas;
  /** Most operations accepted in one request. @default 1000 */
  maxOperations?: number;
}

type Op = 'add' | 'replace' | 'remove';

function error(scimType: ScimType, message: string): ScimError {
  return new ScimError(400, scimType, message);
}

interface Target {
  resolved: ResolvedAttribute;
  filter?: ScimFilter;
  /** The sub-attribute addressed (after a value path, or `attr.sub`). */
  sub?: ScimAttributeDefinition;
}

function checkPathSegments(path: string): void {
  for (const part of path.split(/[^A-Za-z0-9_$]+/)) {
    if (FORBIDDEN_KEYS.has(part)) throw error('invalidPath', 'The path names a forbidden attribute');
  }
}

function resolveTarget(schemas: ScimResourceSchemas, raw: string): Target | { extension: string } {
  checkPathSegments(raw);
  const schema = raw.toLowerCase().startsWith('urn:') ? findSchema(schemas, raw) : undefined;
  if (schema && schema !== schemas.core) return { extension: schema.id };
  const parsed: ScimPatchPath = parseScimPath(raw);
  const resolved = resolveAttribute(schemas, { ...parsed.path, subAttribute: undefined });
  if (!resolved) throw error('invalidPath', `Unknown attribute ${JSON.stringify(raw)}`);
  const { definition } = resolved;
  if (parsed.filter && !(definition.type === 'complex' && definition.multiValued)) {
    throw error('invalidPath', `${definition.name} does not take a value filter`);
  }
  const subName = parsed.path.subAttribute ?? parsed.subAttribute;
  let sub: ScimAttributeDefinition | undefined;
  if (subName !== undefined) {
    sub = findSubAttribute(definition, subName);
    if (!sub) throw error('invalidPath', `Unknown sub-attribute ${JSON.stringify(raw)}`);
  }
  return { resolved, ...(parsed.filter ? { filter: parsed.filter } : {}), ...(sub ? { sub } : {}) };
}

/** The object holding the attribute: the resource, or its extension object. */
function holder(
  doc: Record<string, unknown>,
  resolved: ResolvedAttribute,
  create: boolean,
): Record<string, unknown> | undefined {
  if (!resolved.extension) return doc;
  const key = findKey(doc, resolved.extension);
  const existing = key === undefined ? undefined : doc[key];
  if (isPlainObject(existing)) return existing;
  if (!create) return undefined;
  const made: Record<string, unknown> = {};
  setOwn(doc, resolved.extension, made);
  return made;
}

function deleteKey(object: Record<string, unknown>, name: string): void {
  const key = findKey(object, name);
  if (key !== undefined) delete object[key];
}

function read(object: Record<string, unknown> | undefined, name: string): unknown {
  if (!object) return undefined;
  const key = findKey(object, name);
  return key === undefined ? undefined : object[key];
}

function write(object: Record<string, unknown>, name: string, value: unknown): void {
  deleteKey(object, name);
  if (value !== undefined) setOwn(object, name, value);
}

function sameValue(a: unknown, b: unknown, caseExact: boolean): boolean {
  if (typeof a === 'string' && typeof b === 'string')
    return caseExact ? a === b : a.toLowerCase() === b.toLowerCase();
  return JSON.stringify(a) === JSON.stringify(b);
}

/** At most one value of a multi-valued attribute is primary: the last one set wins (RFC 7644 §3.5.2). */
function enforceSinglePrimary(list: unknown[], winners: unknown[]): void {
  const chosen = [...winners].reverse().find((v) => isPlainObject(v) && v.primary === true);
  if (!chosen) return;
  for (const item of list)
    if (item !== chosen && isPlainObject(item) && item.primary === true) item.primary = false;
}

/** `type eq "work" and …` as `{ type: "work", … }`; undefined for any other filter. */
function equalities(
  filter: ScimFilter,
  parent: ScimAttributeDefinition,
  out: Record<string, unknown> = {},
): Record<string, unknown> | undefined {
  if (filter.type === 'and') {
    return equalities(filter.left, parent, out) && equalities(filter.right, parent, out);
  }
  if (filter.type !== 'compare' || filter.operator !== 'eq' || filter.value === null) return undefined;
  const sub = findSubAttribute(parent, filter.path.attribute);
  if (!sub) return undefined;
  const value = normalizeElement(sub, filter.value);
  if (value === undefined) return undefined;
  setOwn(out, sub.name, value);
  return out;
}

class PatchRun {
  constructor(
    private readonly doc: Record<string, unknown>,
    private readonly schemas: ScimResourceSchemas,
  ) {}

  apply(op: Op, path: string | undefined, value: unknown): void {
    if (path === undefined) {
      if (op === 'remove') throw error('noTarget', 'remove needs a path');
      if (!isPlainObject(value)) throw error('invalidValue', `${op} without a path needs an object value`);
      for (const [key, item] of Object.entries(value)) {
        if (key.toLowerCase() === 'schemas') continue;
        const target = this.tryResolve(key);
        // Path-less values are the resource's own attributes: unknown ones are ignored, as on create.
        if (!target) continue;
        if ('extension' in target) this.applyExtension(op, target.extension, item);
        else this.applyTarget(op, target, item);
      }
      return;
    }
    const target = resolveTarget(this.schemas, path);
    if ('extension' in target) {
      if (op === 'remove') deleteKey(this.doc, target.extension);
      else this.applyExtension(op, target.extension, value);
      return;
    }
    this.applyTarget(op, target, value);
  }

  private tryResolve(key: string): ReturnType<typeof resolveTarget> | undefined {
    checkPathSegments(key);
    try {
      return resolveTarget(this.schemas, key);
    } catch (err) {
      if (err instanceof ScimError && err.scimType === 'invalidPath') return undefined;
      throw err;
    }
  }

  private applyExtension(op: Op, urn: string, value: unknown): void {
    if (!isPlainObject(value)) throw error('invalidValue', `${urn} needs an object value`);
    for (const [key, item] of Object.entries(value)) {
      const target = this.tryResolve(`${urn}:${key}`);
      if (target && !('extension' in target)) this.applyTarget(op, target, item);
    }
  }

  private checkMutability(op: Op, target: Target, value: unknown): boolean {
    const { definition } = target.resolved;
    const guarded = target.sub ?? definition;
    const readOnly = definition.mutability === 'readOnly' || guarded.mutability === 'readOnly';
    const immutable = definition.mutability === 'immutable' || guarded.mutability === 'immutable';
    if (!readOnly && !immutable) return true;
    // Writing the value it already has is allowed (clients echo whole resources), changing it is not.
    if (op !== 'remove' && !target.filter && !target.sub) {
      const current = read(holder(this.doc, target.resolved, false), definition.name);
      if (
        current !== undefined &&
        sameValue(current, normalizeAttributeValue(definition, value), definition.caseExact)
      ) {
        return false;
      }
    }
    throw new ScimError(400, 'mutability', `${guarded.name} cannot be changed`);
  }

  private applyTarget(op: Op, target: Target, rawValue: unknown): void {
    if (!this.checkMutability(op, target, rawValue)) return;
    const { resolved, filter, sub } = target;
    const { definition } = resolved;
    if (op === 'remove' || rawValue === null) {
      // add/replace with null unassigns (RFC 7644 §3.5.2)
      this.remove(target, op === 'remove' ? rawValue : undefined);
      return;
    }
    const container = holder(this.doc, resolved, true)!;
    const current = read(container, definition.name);

    if (!definition.multiValued) {
      if (sub) {
        const object = isPlainObject(current) ? current : {};
        write(object, sub.name, normalizeAttributeValue(sub, rawValue, `${definition.name}.${sub.name}`));
        write(container, definition.name, Object.keys(object).length ? object : undefined);
      } else if (definition.type === 'complex') {
        // Complex add/replace merges the given sub-attributes (RFC 7644 §3.5.2.1, §3.5.2.3).
        const incoming = normalizeAttributeValue(definition, rawValue) as Record<string, unknown> | undefined;
        const object = isPlainObject(current) ? current : {};
        for (const [key, item] of Object.entries(incoming ?? {})) setOwn(object, key, item);
        write(container, definition.name, Object.keys(object).length ? object : undefined);
      } else {
        write(container, definition.name, normalizeAttributeValue(definition, rawValue));
      }
      this.pruneExtension(resolved);
      return;
    }

    const list = Array.isArray(current) ? current : [];
    if (filter) {
      const matches = this.matching(list, definition, filter);
      if (matches.length === 0) {
        const seed = equalities(filter, definition);
        if (!seed) throw error('noTarget', `No ${definition.name} value matches the filter`);
        const element = seed;
        if (sub)
          setOwn(element, sub.name, normalizeAttributeValue(sub, rawValue, `${definition.name}.${sub.name}`));
        else {
          const incoming = (normalizeElement(definition, rawValue) ?? {}) as Record<string, unknown>;
          for (const [key, item] of Object.entries(incoming)) setOwn(element, key, item);
        }
        list.push(element);
        enforceSinglePrimary(list, [element]);
      } else {
        for (const match of matches) {
          if (sub) {
            write(match, sub.name, normalizeAttributeValue(sub, rawValue, `${definition.name}.${sub.name}`));
          } else {
            const incoming = (normalizeElement(definition, rawValue) ?? {}) as Record<string, unknown>;
            if (op === 'replace') for (const key of Object.keys(match)) delete match[key];
            for (const [key, item] of Object.entries(incoming)) setOwn(match, key, item);
          }
        }
        enforceSinglePrimary(list, matches);
      }
      write(container, definition.name, list.length ? list : undefined);
      return;
    }

    if (sub) {
      // `emails.value` without a filter addresses that sub-attribute of every value.
      const value = normalizeAttributeValue(sub, rawValue, `${definition.name}.${sub.name}`);
      if (list.length === 0) list.push({});
      for (const item of list) if (isPlainObject(item)) write(item, sub.name, value);
      write(container, definition.name, list.length ? list : undefined);
      return;
    }

    const incoming = (normalizeAttributeValue(definition, rawValue) ?? []) as unknown[];
    if (op === 'replace') {
      write(container, definition.name, incoming.length ? incoming : undefined);
      enforceSinglePrimary(incoming, incoming);
    } else {
      const seen = new Set(list.map(canonicalJson));
      const added = incoming.filter((item) => !seen.has(canonicalJson(item)));
      list.push(...added);
      enforceSinglePrimary(list, added);
      write(container, definition.name, list.length ? list : undefined);
    }
    this.pruneExtension(resolved);
  }

  private matching(
    list: unknown[],
    definition: ScimAttributeDefinition,
    filter: ScimFilter,
  ): Record<string, unknown>[] {
    let test: (resource: unknown) => boolean;
    try {
      test = compileScimFilter(
        { type: 'valuePath', path: { attribute: definition.name }, filter },
        { core: { id: '', name: '', description: '', attributes: [definition] }, extensions: [], common: [] },
      );
    } catch (err) {
      if (err instanceof ScimError) throw error('invalidPath', err.message);
      throw err;
    }
    return list.filter(
      (item): item is Record<string, unknown> => isPlainObject(item) && test({ [definition.name]: [item] }),
    );
  }

  private remove(target: Target, value: unknown): void {
    const { resolved, filter, sub } = target;
    const { definition } = resolved;
    if ((definition.required && !sub) || sub?.required) {
      throw error('invalidValue', `${(sub ?? definition).name} is required`);
    }
    const container = holder(this.doc, resolved, false);
    if (!container) return;
    const current = read(container, definition.name);
    if (current === undefined) return;
    if (!definition.multiValued) {
      if (sub && isPlainObject(current)) {
        deleteKey(current, sub.name);
        if (!Object.keys(current).length) deleteKey(container, definition.name);
      } else {
        deleteKey(container, definition.name);
      }
      this.pruneExtension(resolved);
      return;
    }
    const list = Array.isArray(current) ? current : [];
    let keep: unknown[];
    if (filter) {
      const matches = new Set<unknown>(this.matching(list, definition, filter));
      if (sub) {
        for (const item of matches) deleteKey(item as Record<string, unknown>, sub.name);
        keep = list.filter((item) => !(isPlainObject(item) && Object.keys(item).length === 0));
      } else {
        keep = list.filter((item) => !matches.has(item));
      }
    } else if (sub) {
      for (const item of list) if (isPlainObject(item)) deleteKey(item, sub.name);
      keep = list.filter((item) => !(isPlainObject(item) && Object.keys(item).length === 0));
    } else if (value !== undefined && value !== null) {
      // Entra-style `remove` with the values to take out of a multi-valued attribute.
      const removing = normalizeAttributeValue(definition, value) as unknown[] | undefined;
      const valueSub = findSubAttribute(definition, 'value');
      const key = (item: unknown): unknown => (isPlainObject(item) && valueSub ? read(item, 'value') : item);
      const caseExact = valueSub ? valueSub.caseExact : definition.caseExact;
      keep = list.filter((item) => !(removing ?? []).some((r) => sameValue(key(item), key(r), caseExact)));
    } else {
      keep = [];
    }
    write(container, definition.name, keep.length ? keep : undefined);
    this.pruneExtension(resolved);
  }

  private pruneExtension(resolved: ResolvedAttribute): void {
    if (!resolved.extension) return;
    const key = findKey(this.doc, resolved.extension);
    if (key === undefined) return;
    const ext = this.doc[key];
    if (isPlainObject(ext) && Object.keys(ext).length === 0) delete this.doc[key];
  }
}

/** Checks the PatchOp envelope and returns its operations (400 `invalidSyntax` when malformed). */
export function readScimPatchRequest(body: unknown, maxOperations = 1000): ScimPatchOperation[] {
  if (!isPlainObject(body)) throw error('invalidSyntax', 'The body must be a PatchOp object');
  const schemas = read(body, 'schemas');
  if (
    !Array.isArray(schemas) ||
    !schemas.some((s) => typeof s === 'string' && s.toLowerCase() === PATCH_OP_SCHEMA_ID.toLowerCase())
  ) {
    throw error('invalidSyntax', `schemas must list ${PATCH_OP_SCHEMA_ID}`);
  }
  const operations = read(body, 'Operations');
  if (!Array.isArray(operations) || operations.length === 0)
    throw error('invalidSyntax', 'Operations must be a non-empty array');
  if (operations.length > maxOperations)
    throw error('invalidSyntax', `At most ${maxOperations} operations per request`);
  return operations.map((raw) => {
    if (!isPlainObject(raw)) throw error('invalidSyntax', 'Each operation must be an object');
    const op = read(raw, 'op');
    const path = read(raw, 'path');
    if (typeof op !== 'string') throw error('invalidSyntax', 'Each operation needs an op');
    if (path !== undefined && path !== null && typeof path !== 'string')
      throw error('invalidPath', 'path must be a string');
    const operation: ScimPatchOperation = { op };
    if (typeof path === 'string' && path.trim() !== '') operation.path = path;
    if (Object.hasOwn(raw, 'value') || findKey(raw, 'value') !== undefined)
      operation.value = read(raw, 'value');
    return operation;
  });
}

/**
 * Applies a PatchOp request (`{ schemas, Operations }`) to a resource, returning the patched copy;
 * `resource` itself is never modified. Throws `ScimError` 400 (`invalidSyntax`, `invalidPath`,
 * `invalidValue`, `noTarget`, `mutability`) and then nothing has changed.
 */
export function applyScimPatch(
  resource: Record<string, unknown>,
  request: unknown,
  options: ApplyScimPatchOptions = {},
): Record<string, unknown> {
  const operations = readScimPatchRequest(request, options.maxOperations);
  return applyScimPatchOperations(resource, operations, options);
}

/** `applyScimPatch` for operations already taken out of their envelope. */
export function applyScimPatchOperations(
  resource: Record<string, unknown>,
  operations: ScimPatchOperation[],
  options: ApplyScimPatchOptions = {},
): Record<string, unknown> {
  const schemas = options.schemas ?? USER_RESOURCE_SCHEMAS;
  // Validate everything first so no hostile key ever reaches the copy.
  const checked = operations.map((operation): { op: Op; path?: string; value: unknown } => {
    const op = typeof operation.op === 'string' ? operation.op.toLowerCase() : '';
    if (op !== 'add' && op !== 'replace' && op !== 'remove') {
      throw error('invalidSyntax', `Unknown op ${JSON.stringify(operation.op)}`);
    }
    if (operation.path !== undefined) {
      if (typeof operation.path !== 'string') throw error('invalidPath', 'path must be a string');
      checkPathSegments(operation.path);
    }
    if (hasForbiddenKey(operation.value)) throw error('invalidValue', 'The value holds a forbidden key');
    if (op !== 'remove' && operation.value === undefined) throw error('invalidValue', `${op} needs a value`);
    return { op, path: operation.path, value: operation.value };
  });
  const doc = structuredClone(resource);
  const run = new PatchRun(doc, schemas);
  for (const { op, path, value } of checked) run.apply(op, path, value);
  return doc;
}
