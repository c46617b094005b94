/**
 * The `attributes` and `excludedAttributes` parameters (RFC 7644 §3.4.2.5, §3.9): which attributes
 * of a resource are returned. `id` and `schemas` (and any `returned: "always"` attribute) are always
 * returned; `returned: "never"` ones (`password`) never are. Names are case-insensitive and may be
 * URN-qualified, name a sub-attribute (`name.givenName`), or name a whole extension by its URN.
 */
import { ScimError } from '../http/http-error.js';
import { parseScimAttributePath } from './filter-parser.js';
import { isPlainObject, setOwn } from './json-access.js';
import {
  findSchema,
  findSubAttribute,
  resolveAttribute,
  type ScimAttributeDefinition,
  type ScimResourceSchemas,
} from './schema.js';

/** The parsed `attributes` / `excludedAttributes` of a request. */
export interface ScimAttributeSelection {
  attributes?: string[];
  excludedAttributes?: string[];
}

/**
 * Splits a comma-separated parameter (or an array from a SearchRequest body) into names; undefined
 * when absent or empty. A value of another type is a 400 `invalidValue`.
 */
export function parseAttributeList(value: unknown): string[] | undefined {
  if (value === undefined || value === null) return undefined;
  const items = Array.isArray(value) ? value : [value];
  const names: string[] = [];
  for (const item of items) {
    if (typeof item !== 'string') throw new ScimError(400, 'invalidValue', 'Attribute lists hold strings');
    for (const name of item.split(',')) if (name.trim() !== '') names.push(name.trim());
  }
  return names.length ? names : undefined;
}

/** Compiled selection: keys are `container|attribute[.sub]`, lowercased; container '' is the core. */
interface Compiled {
  attributes?: Set<string>;
  excluded: Set<string>;
}

function compileNames(names: string[], schemas: ScimResourceSchemas): Set<string> {
  const keys = new Set<string>();
  for (const name of names) {
    const schema = name.toLowerCase().startsWith('urn:') ? findSchema(schemas, name) : undefined;
    if (schema && schema !== schemas.core) {
      keys.add(`${schema.id.toLowerCase()}|*`);
      continue;
    }
    const path = parseScimAttributePath(name, 'invalidValue');
    const resolved = resolveAttribute(schemas, path);
    // Unknown attributes select nothing (RFC 7644 lets clients ask for attributes a server lacks).
    if (!resolved) continue;
    const container = resolved.extension?.toLowerCase() ?? '';
    const base = `${container}|${resolved.definition.name.toLowerCase()}`;
    keys.add(resolved.subAttribute ? `${base}.${resolved.subAttribute.name.toLowerCase()}` : base);
  }
  return keys;
}

function projectValue(
  definition: ScimAttributeDefinition,
  value: unknown,
  keep: (sub: ScimAttributeDefinition) => boolean,
): unknown {
  const projectObject = (object: unknown): unknown => {
    if (!isPlainObject(object)) return object;
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(object)) {
      const sub = findSubAttribute(definition, key);
      if (sub ? keep(sub) : true) setOwn(out, key, item);
    }
    return Object.keys(out).length ? out : undefined;
  };
  if (Array.isArray(value)) {
    const items = value.map(projectObject).filter((v) => v !== undefined);
    return items.length ? items : undefined;
  }
  return projectObject(value);
}

function selectAttribute(
  definition: ScimAttributeDefinition,
  value: unknown,
  container: string,
  compiled: Compiled,
): unknown {
  if (definition.returned === 'never') return undefined;
  if (definition.returned === 'always') return value;
  const base = `${container}|${definition.name.toLowerCase()}`;
  const subKey = (sub: ScimAttributeDefinition) => `${base}.${sub.name.toLowerCase()}`;
  if (compiled.attributes) {
    const whole =
      compiled.attributes.has(base) || (container !== '' && compiled.attributes.has(`${container}|*`));
    if (whole) return value;
    if (definition.type !== 'complex') return undefined;
    const anySub = definition.subAttributes?.some((sub) => compiled.attributes!.has(subKey(sub)));
    if (!anySub) return undefined;
    return projectValue(
      definition,
      value,
      (sub) => sub.returned === 'always' || compiled.attributes!.has(subKey(sub)),
    );
  }
  if (definition.returned === 'request') return undefined;
  if (compiled.excluded.has(base)) return undefined;
  if (definition.type !== 'complex') return value;
  return projectValue(
    definition,
    value,
    (sub) => sub.returned !== 'never' && !compiled.excluded.has(subKey(sub)),
  );
}

/**
 * Returns a copy of `resource` holding only the attributes the selection asks for. When
 * `attributes` is given it wins and `excludedAttributes` is ignored (RFC 7644 §3.4.2.5 lets a client
 * send one or the other). Throws `ScimError(400, 'invalidValue')` for a malformed name.
 */
export function projectScimAttributes(
  resource: Record<string, unknown>,
  selection: ScimAttributeSelection,
  schemas: ScimResourceSchemas,
): Record<string, unknown> {
  const compiled: Compiled = {
    excluded: compileNames(selection.excludedAttributes ?? [], schemas),
    ...(selection.attributes ? { attributes: compileNames(selection.attributes, schemas) } : {}),
  };
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(resource)) {
    if (key === 'schemas') {
      out.schemas = value;
      continue;
    }
    const extension = key.toLowerCase().startsWith('urn:') ? findSchema(schemas, key) : undefined;
    if (extension && extension !== schemas.core) {
      if (!isPlainObject(value)) continue;
      const container = extension.id.toLowerCase();
      if (!compiled.attributes && compiled.excluded.has(`${container}|*`)) continue;
      const ext: Record<string, unknown> = {};
      for (const [name, item] of Object.entries(value)) {
        const definition = extension.attributes.find((a) => a.name.toLowerCase() === name.toLowerCase());
        const selected = definition
          ? selectAttribute(definition, item, container, compiled)
          : compiled.attributes
            ? undefined
            : item;
        if (selected !== undefined) setOwn(ext, name, selected);
      }
      if (Object.keys(ext).length) setOwn(out, key, ext);
      continue;
    }
    const resolved = resolveAttribute(schemas, { attribute: key });
    if (!resolved || resolved.extension) {
      if (!compiled.attributes) setOwn(out, key, value);
      continue;
    }
    const selected = selectAttribute(resolved.definition, value, '', compiled);
    if (selected !== undefined) setOwn(out, key, selected);
  }
  // Keep `schemas` true to what is left: an extension whose attributes were all left out goes.
  if (Array.isArray(out.schemas)) {
    out.schemas = (out.schemas as unknown[]).filter((urn) => {
      if (typeof urn !== 'string') return false;
      const schema = findSchema(schemas, urn);
      return !schema || schema === schemas.core || Object.hasOwn(out, schema.id);
    });
  }
  return out;
}
