import { auditEventCapability } from '../../audit/capability.js';
import type { SearchParameterDefinition, SearchRegistry } from '../../search/definitions.js';
import { isSupportedParameter } from '../../search/parse.js';
import { R4_RESOURCE_TYPES } from '../../common/resource-types.js';
import {
  limitsDocumentation,
  resultParameters,
  statedLimits,
  type CapabilitySearchLimits,
} from './capability-limits.js';

/** An operation to advertise in the CapabilityStatement. */
export interface CapabilityOperation {
  /** Operation name without `$` (`export`). */
  name: string;
  /** Canonical URL of its OperationDefinition. */
  definition: string;
  /**
   * Resource types it is invoked on (`['Patient', 'Group']` for `Patient/$export` and
   * `Group/[id]/$export`); absent for a system-level operation (`[base]/$export`).
   * @default undefined (system level)
   */
  resourceTypes?: string[];
}

/**
 * What another area adds to the CapabilityStatement (the SMART security service, the bulk export
 * operations, …). Several contributions are applied in order.
 */
export interface CapabilityContribution {
  /** Operations to list (system-level in `rest.operation`, per type in `rest.resource.operation`). */
  operations?: CapabilityOperation[];
  /**
   * Properties merged into `rest[0].security` (`service`, `extension` with the SMART OAuth URIs, `cors`,
   * `description`); extensions and services are appended.
   */
  security?: Record<string, unknown>;
  /** Canonical URLs appended to `instantiates` (e.g. the Bulk Data server CapabilityStatement). */
  instantiates?: string[];
  /** Last step: receives the statement built so far and returns the one to serve. */
  customize?: (statement: CapabilityStatementJson) => CapabilityStatementJson;
}

/** A CapabilityStatement resource as JSON. */
export interface CapabilityStatementJson {
  resourceType: 'CapabilityStatement';
  [key: string]: unknown;
}

/** What the CapabilityStatement that `fhirRouter` serves at `GET [base]/metadata` is built from. */
export interface CapabilityStatementInput {
  /** Absolute URL of the FHIR base (`https://host/fhir/R4`). */
  baseUrl: string;
  /** `software.name` / `software.version`. @default { name: 'fhir-platform-kit' } */
  software?: { name: string; version?: string };
  /** Time the statement is dated (FHIR dateTime). @default now */
  date?: string;
  /** Contributions of other areas, applied in order. @default [] */
  contributions?: CapabilityContribution[];
  /**
   * What conditional delete does with several matches (`fhirRouter`'s `conditionalDelete`), or
   * `not-supported`. @default 'single'
   */
  conditionalDelete?: 'single' | 'multiple' | 'not-supported';
  /**
   * The search limits `fhirRouter` applies (`defaultCount`, `maxCount` and its `searchLimits`),
   * stated in the documentation of the result parameters they bound and in `rest.documentation`
   * (R4 has no element for limits).
   * @default the router's defaults
   */
  searchLimits?: CapabilitySearchLimits;
}

const INTERACTIONS = [
  'read',
  'vread',
  'update',
  'patch',
  'delete',
  'history-instance',
  'history-type',
  'create',
  'search-type',
].map((code) => ({ code }));

/** One `rest.resource.searchParam` entry. */
interface SearchParamEntry {
  name: string;
  definition: string;
  type: string;
  documentation?: string;
}

/**
 * The documentation of `def` for its type: the type's own line of an R4 description shared by
 * several types (`Multiple Resources: * [Observation](observation.html): The code of …`), or the
 * description itself.
 */
function documentationOf(def: SearchParameterDefinition): string | undefined {
  const text = def.description?.trim();
  if (!text?.startsWith('Multiple Resources:')) return text || undefined;
  const line = text.split(/\r?\n/).find((l) => l.startsWith(`* [${def.resourceType}](`));
  return line?.slice(line.indexOf('): ') + 3).trim() || undefined;
}

/** The entries of each type, derived once per registry (fresh copies are served). */
const entriesByRegistry = new WeakMap<SearchRegistry, Map<string, readonly SearchParamEntry[]>>();

/**
 * The search parameters a type search answers for `resourceType`: every R4 parameter the search
 * module parses (the common `_id`, `_lastUpdated`, `_tag`, `_profile`, `_security` and `_source`
 * included), none it refuses (`_text`, `_content`, `_query`, `near`).
 */
function searchParamsOf(registry: SearchRegistry, resourceType: string): SearchParamEntry[] {
  let byType = entriesByRegistry.get(registry);
  if (!byType) entriesByRegistry.set(registry, (byType = new Map<string, readonly SearchParamEntry[]>()));
  let entries = byType.get(resourceType);
  if (!entries) {
    entries = registry
      .parameters(resourceType)
      .filter(isSupportedParameter)
      .map((def) => {
        const documentation = documentationOf(def);
        return {
          name: def.code,
          definition: def.url,
          type: def.type,
          ...(documentation === undefined ? {} : { documentation }),
        };
      });
    byType.set(resourceType, entries);
  }
  return entries.map((entry) => ({ ...entry }));
}

/** `_include` values by source type and `_revinclude` values by target type, from the reference parameters. */
function includesOf(registry: SearchRegistry): {
  includes: Map<string, string[]>;
  revIncludes: Map<string, string[]>;
} {
  const includes = new Map<string, string[]>();
  const revIncludes = new Map<string, string[]>();
  const add = (map: Map<string, string[]>, key: string, value: string) => {
    const list = map.get(key);
    if (list) list.push(value);
    else map.set(key, [value]);
  };
  for (const source of R4_RESOURCE_TYPES) {
    for (const def of registry.parameters(source)) {
      if (def.type !== 'reference' || !isSupportedParameter(def)) continue;
      add(includes, source, `${source}:${def.code}`);
      for (const target of def.targets) add(revIncludes, target, `${source}:${def.code}`);
    }
  }
  return { includes, revIncludes };
}

/**
 * Merges `add` into `target` (a `rest.security` block): arrays (`extension`, `service`) are
 * appended to, other properties replaced.
 */
export function mergeSecurity(target: Record<string, unknown>, add: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(add)) {
    const current = target[key];
    if (Array.isArray(current) && Array.isArray(value))
      target[key] = [...(current as unknown[]), ...(value as unknown[])];
    else target[key] = value;
  }
}

/**
 * The server's CapabilityStatement (`GET [base]/metadata`): FHIR 4.0.1, JSON, every R4 resource type
 * with read / vread / update / patch / delete / history-instance / history-type / create /
 * search-type (history-system and batch / transaction at the system level), versioning with If-Match,
 * conditional create, read, update and delete, the search parameters each type answers (from
 * `registry`, with their definition URLs), the search limits (`rest.documentation`), batch and
 * transaction; extended by the given
 * contributions (security service, operations, instantiated statements).
 * @see https://hl7.org/fhir/R4/capabilitystatement.html
 */
export function buildCapabilityStatement(
  input: CapabilityStatementInput,
  registry: SearchRegistry,
): CapabilityStatementJson {
  const contributions = input.contributions ?? [];
  const limits = statedLimits(input.searchLimits);
  const typeOperations = new Map<string, { name: string; definition: string }[]>();
  const systemOperations: { name: string; definition: string }[] = [];
  const security: Record<string, unknown> = {};
  const instantiates: string[] = [];
  for (const c of contributions) {
    for (const op of c.operations ?? []) {
      const entry = { name: op.name, definition: op.definition };
      if (!op.resourceTypes) systemOperations.push(entry);
      for (const type of op.resourceTypes ?? []) {
        const list = typeOperations.get(type) ?? [];
        list.push(entry);
        typeOperations.set(type, list);
      }
    }
    if (c.security) mergeSecurity(security, c.security);
    instantiates.push(...(c.instantiates ?? []));
  }

  const { includes, revIncludes } = includesOf(registry);
  const resource = R4_RESOURCE_TYPES.map((type) => ({
    type,
    profile: `http://hl7.org/fhir/StructureDefinition/${type}`,
    interaction: INTERACTIONS,
    versioning: 'versioned-update',
    readHistory: true,
    updateCreate: true,
    conditionalCreate: true,
    conditionalRead: 'full-support',
    conditionalUpdate: true,
    conditionalDelete: input.conditionalDelete ?? 'single',
    searchInclude: ['*', ...(includes.get(type) ?? [])],
    searchRevInclude: revIncludes.get(type) ?? [],
    searchParam: searchParamsOf(registry, type),
    ...(typeOperations.has(type) ? { operation: typeOperations.get(type) } : {}),
  })).map(auditEventCapability);

  let statement: CapabilityStatementJson = {
    resourceType: 'CapabilityStatement',
    status: 'active',
    date: input.date ?? new Date().toISOString(),
    kind: 'instance',
    ...(instantiates.length > 0 ? { instantiates } : {}),
    software: input.software ?? { name: 'fhir-platform-kit' },
    implementation: { description: 'fhir-platform-kit FHIR R4 server', url: input.baseUrl },
    fhirVersion: '4.0.1',
    format: ['json', 'application/fhir+json'],
    rest: [
      {
        mode: 'server',
        documentation: limitsDocumentation(limits),
        ...(Object.keys(security).length > 0 ? { security } : {}),
        resource,
        interaction: [{ code: 'batch' }, { code: 'transaction' }, { code: 'history-system' }],
        searchParam: resultParameters(limits),
        ...(systemOperations.length > 0 ? { operation: systemOperations } : {}),
      },
    ],
  };
  for (const c of contributions) if (c.customize) statement = c.customize(statement);
  return statement;
}
