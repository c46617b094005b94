import { auditEventCapability } from '../audit/capability.js';
import { R4_RESOURCE_TYPES } from '../common/resource-types.js';
import { patientSearchParams } from './compartment.js';

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
}

const INTERACTIONS = ['read', 'vread', 'update', 'patch', 'delete', 'create', 'search-type'].map((code) => ({
  code,
}));

const COMMON_SEARCH_PARAMS = [
  { name: '_id', type: 'token', definition: 'http://hl7.org/fhir/SearchParameter/Resource-id' },
  {
    name: '_lastUpdated',
    type: 'date',
    definition: 'http://hl7.org/fhir/SearchParameter/Resource-lastUpdated',
    documentation: 'Prefixes eq, gt, ge, lt, le; partial dates are ranges.',
  },
  { name: 'identifier', type: 'token', documentation: 'system|value, |value, system| or value.' },
];

function mergeSecurity(target: Record<string, unknown>, add: Record<string, unknown>): void {
  for (const [key, value] of Object.entries(add)) {
    const current = target[key];
    if (Array.isArray(current) && Array.isArray(value))
      target[key] = [...(current as unknown[]), ...(value as unknown[])];
    else target[key] = value;
  }
}

/**
 * The server's CapabilityStatement (`GET [base]/metadata`): FHIR 4.0.1, JSON, every R4 resource type
 * with read / vread / update / patch / delete / create / search-type, versioning with If-Match,
 * conditional create, read, update and delete, the supported search parameters, batch and transaction; extended by the given contributions (security service,
 * operations, instantiated statements).
 * @see https://hl7.org/fhir/R4/capabilitystatement.html
 */
export function buildCapabilityStatement(input: CapabilityStatementInput): CapabilityStatementJson {
  const contributions = input.contributions ?? [];
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

  const resource = R4_RESOURCE_TYPES.map((type) => ({
    type,
    profile: `http://hl7.org/fhir/StructureDefinition/${type}`,
    interaction: INTERACTIONS,
    versioning: 'versioned-update',
    readHistory: false,
    updateCreate: true,
    conditionalCreate: true,
    conditionalRead: 'full-support',
    conditionalUpdate: true,
    conditionalDelete: input.conditionalDelete ?? 'single',
    searchParam: [
      ...COMMON_SEARCH_PARAMS,
      ...patientSearchParams(type).map((name) => ({
        name,
        type: 'reference',
        documentation: 'Patient/[id], [id] or an absolute Patient URL; another Type/[id] matches exactly.',
      })),
    ],
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
        ...(Object.keys(security).length > 0 ? { security } : {}),
        resource,
        interaction: [{ code: 'batch' }, { code: 'transaction' }],
        searchParam: [
          { name: '_count', type: 'number', documentation: 'Page size (capped by the server).' },
          {
            name: '_offset',
            type: 'number',
            documentation: 'Number of matches to skip (next links use it).',
          },
          { name: '_sort', type: 'string', documentation: '_lastUpdated, -_lastUpdated, _id, -_id.' },
          { name: '_summary', type: 'token', documentation: 'count only.' },
        ],
        ...(systemOperations.length > 0 ? { operation: systemOperations } : {}),
      },
    ],
  };
  for (const c of contributions) if (c.customize) statement = c.customize(statement);
  return statement;
}
