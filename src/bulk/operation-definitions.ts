import type { RequestHandler } from 'express';
import { sendFhir } from '../http/protocol-responses.js';

/*
 * This server's own OperationDefinitions of the three export operations: those of the Bulk Data IG
 * (their `base`) with every parameter this server takes, Bulk Data 3.0.0's included. The bulk
 * router serves them at `[base]/OperationDefinition/{id}`, and the CapabilityStatement's
 * operations point at them (see `bulkExportCapability`).
 */

const IG = 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition';

/** One parameter of an OperationDefinition (R4 `OperationDefinition.parameter`). */
interface OperationParameter {
  name: string;
  use: 'in';
  min: 0;
  max: '1' | '*';
  type: string;
  documentation: string;
  targetProfile?: string[];
}

const param = (
  name: string,
  max: '1' | '*',
  type: string,
  documentation: string,
  extra: Partial<OperationParameter> = {},
): OperationParameter => ({ name, use: 'in', min: 0, max, type, documentation, ...extra });

/** The parameters every level takes, in the order of the IG's definitions. */
function commonParameters(): OperationParameter[] {
  return [
    param(
      '_outputFormat',
      '1',
      'string',
      'application/fhir+ndjson (also application/ndjson, ndjson): the only format written.',
    ),
    param(
      '_since',
      '1',
      'instant',
      'Only resources changed after this instant; the manifest then lists deletions.',
    ),
    param(
      '_until',
      '1',
      'instant',
      'Only resources changed at or before this instant (with _since, the window between); a later one is capped at the kick-off.',
    ),
    param('_type', '*', 'string', 'Resource types to export (comma-separated or repeated).'),
    param(
      '_elements',
      '*',
      'string',
      'Top-level elements to keep (Type.element or element); resources are tagged SUBSETTED.',
    ),
    param(
      'includeAssociatedData',
      '*',
      'code',
      'LatestProvenanceResources or RelevantProvenanceResources: the Provenance of the exported resources.',
    ),
    param(
      '_typeFilter',
      '*',
      'string',
      'Type?search queries a resource of that type must match (any of them).',
    ),
    param(
      'organizeOutputBy',
      '1',
      'string',
      'Patient: each file holds blocks of whole patient compartments, each led by a Parameters header naming the Patient.',
    ),
    param(
      'allowPartialManifests',
      '1',
      'boolean',
      'true: while the export runs, the status URL answers manifest pages of the files already complete, linked by next.',
    ),
  ];
}

const PATIENT = param('patient', '*', 'Reference', 'Patients whose compartments are exported (POST only).', {
  targetProfile: ['http://hl7.org/fhir/StructureDefinition/Patient'],
});

/** The three definitions by id: where each is invoked, and what it adds. */
const DEFINITIONS = {
  'bulk-export': {
    code: 'export',
    base: `${IG}/export`,
    title: 'System level export',
    system: true,
    resource: [],
  },
  'bulk-patient-export': {
    code: 'export',
    base: `${IG}/patient-export`,
    title: 'Patient level export',
    system: false,
    resource: ['Patient'],
  },
  'bulk-group-export': {
    code: 'export',
    base: `${IG}/group-export`,
    title: 'Group level export',
    system: false,
    resource: ['Group'],
  },
} as const;

/**
 * The `definition` the CapabilityStatement's `$import` entry carries until `pointToOwnDefinitions`
 * makes it this server's (no IG defines `$import`).
 */
export const IMPORT_DEFINITION = 'urn:fhir-platform-kit:OperationDefinition/import';

/** The ids of this server's bulk OperationDefinitions, by the IG definition each is based on. */
export const OWN_DEFINITION_IDS: Readonly<Record<string, string>> = {
  [`${IG}/export`]: 'bulk-export',
  [`${IG}/patient-export`]: 'bulk-patient-export',
  [`${IG}/group-export`]: 'bulk-group-export',
  [IMPORT_DEFINITION]: 'bulk-import',
};

/** A parameter made of parts (`input`: `type` and `url`). */
const partsParameter = (name: string, max: '1' | '*', documentation: string, part: OperationParameter[]) => ({
  name,
  use: 'in',
  min: 0,
  max,
  documentation,
  part: part.map((p) => ({ ...p, min: 1 })),
});

/** `$import` (docs/bulk-import.md): ping and pull, no IG definition to be based on. */
function importDefinition(fhirBase: string): Record<string, unknown> {
  return {
    resourceType: 'OperationDefinition',
    id: 'bulk-import',
    url: `${fhirBase}/OperationDefinition/bulk-import`,
    name: 'BulkImport',
    title: 'Bulk import (ping and pull)',
    status: 'active',
    kind: 'operation',
    description:
      "Loads another server's Bulk Data export (its status URL) or listed NDJSON files into the caller's project, asynchronously (202, status at $import-status).",
    code: 'import',
    system: true,
    type: false,
    instance: false,
    parameter: [
      param('manifestUrl', '1', 'uri', "The status URL of another server's completed export."),
      partsParameter('input', '*', 'One NDJSON file (instead of manifestUrl).', [
        param('type', '1', 'code', 'The resource type of its lines.'),
        param('url', '1', 'uri', 'Where to GET it.'),
      ]),
      param('inputSource', '1', 'uri', "The source's FHIR base: its absolute references are made relative."),
      param('accessToken', '1', 'string', 'A bearer token for the source, for this job.'),
      param('inputFormat', '1', 'string', 'application/fhir+ndjson, the only format.'),
    ],
  };
}

/**
 * The OperationDefinition `id` of this server, whose `url` is `{fhirBase}/OperationDefinition/{id}`;
 * undefined for an id it does not define.
 */
export function exportOperationDefinition(id: string, fhirBase: string): Record<string, unknown> | undefined {
  if (id === 'bulk-import') return importDefinition(fhirBase);
  if (!Object.hasOwn(DEFINITIONS, id)) return undefined;
  const definition = DEFINITIONS[id as keyof typeof DEFINITIONS];
  return {
    resourceType: 'OperationDefinition',
    id,
    url: `${fhirBase}/OperationDefinition/${id}`,
    name: id.replace(/(^|-)([a-z])/g, (_m, _dash: string, c: string) => c.toUpperCase()),
    title: definition.title,
    status: 'active',
    kind: 'operation',
    description: `${definition.title} (Bulk Data Access), as this server runs it: every parameter it takes.`,
    code: definition.code,
    base: definition.base,
    ...(definition.resource.length > 0 ? { resource: [...definition.resource] } : {}),
    system: definition.system,
    type: definition.resource.length > 0,
    instance: (definition.resource as readonly string[]).includes('Group'),
    parameter: [...commonParameters(), ...(definition.system ? [] : [PATIENT])],
  };
}

/**
 * `GET /OperationDefinition/{id}` for this server's export definitions (public, as the
 * CapabilityStatement is); any other id is passed on (`next()`), to the FHIR router if mounted.
 * `fhirBase` gives the FHIR base URL of the request.
 */
export function operationDefinitionRoute(
  fhirBase: (req: Parameters<RequestHandler>[0]) => string,
): RequestHandler {
  return (req, res, next) => {
    const id = /^\/OperationDefinition\/([^/]+)\/?$/.exec(req.path)?.[1];
    const definition = id === undefined ? undefined : exportOperationDefinition(id, fhirBase(req));
    if (!definition) {
      next();
      return;
    }
    sendFhir(res, 200, definition);
  };
}

/** The route `operationDefinitionRoute` answers. */
export const OPERATION_DEFINITION_ROUTE = /^\/OperationDefinition\/[^/]+\/?$/;

/**
 * A CapabilityStatement `customize` step: the export operations' `definition`s (the IG's
 * canonicals) become this server's own definitions under `implementation.url`, the FHIR base as
 * requested. Unchanged when the statement has no `implementation.url`.
 */
export function pointToOwnDefinitions<T extends Record<string, unknown>>(statement: T): T {
  const fhirBase = (statement.implementation as { url?: unknown } | undefined)?.url;
  if (typeof fhirBase !== 'string' || fhirBase === '') return statement;
  const own = (operations: unknown): void => {
    for (const operation of Array.isArray(operations) ? (operations as { definition?: unknown }[]) : []) {
      const id =
        typeof operation.definition === 'string' ? OWN_DEFINITION_IDS[operation.definition] : undefined;
      if (id) operation.definition = `${fhirBase.replace(/\/+$/, '')}/OperationDefinition/${id}`;
    }
  };
  for (const rest of (statement.rest as Record<string, unknown>[] | undefined) ?? []) {
    own(rest.operation);
    for (const resource of (rest.resource as Record<string, unknown>[] | undefined) ?? [])
      own(resource.operation);
  }
  return statement;
}
