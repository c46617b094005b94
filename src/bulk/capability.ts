import { IMPORT_DEFINITION, pointToOwnDefinitions } from './operation-definitions.js';

/** The Bulk Data CapabilityStatement this server instantiates (Bulk Data 2.0.0). */
export const BULK_DATA_CAPABILITY_STATEMENT = 'http://hl7.org/fhir/uv/bulkdata/CapabilityStatement/bulk-data';

const OPERATIONS = [
  { name: 'export', definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export' },
  {
    name: 'patient-export',
    definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/patient-export',
  },
  { name: 'group-export', definition: 'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/group-export' },
] as const;

/**
 * The bulk export part of the CapabilityStatement, in the shape of the FHIR router's capability
 * contribution (`{ operations, instantiates, customize }`): `export` at system level, on Patient and
 * on Group (each named as it is invoked, `$export`, with its own definition: `patient-export`,
 * `group-export`), and `instantiates` the Bulk Data CapabilityStatement. `customize` points the
 * definitions at this server's own (`[base]/OperationDefinition/bulk-export`, …, served by the bulk
 * router), which list every parameter it takes, Bulk Data 3.0.0's included.
 * @see https://hl7.org/fhir/R4/capabilitystatement-definitions.html#CapabilityStatement.rest.resource.operation.name
 */
export function bulkExportCapability(options: { import?: boolean } = {}): {
  operations: { name: string; definition: string; resourceTypes?: string[] }[];
  instantiates: string[];
  customize: typeof pointToOwnDefinitions;
} {
  const [system, patient, group] = bulkExportOperations() as [
    { name: string; definition: string },
    { name: string; definition: string },
    { name: string; definition: string },
  ];
  return {
    operations: [
      system,
      { ...patient, name: 'export', resourceTypes: ['Patient'] },
      { ...group, name: 'export', resourceTypes: ['Group'] },
      ...(options.import === false ? [] : [{ name: 'import', definition: IMPORT_DEFINITION }]),
    ],
    instantiates: [BULK_DATA_CAPABILITY_STATEMENT],
    customize: pointToOwnDefinitions,
  };
}

/** The operations `bulkExportRouter` serves, as `CapabilityStatement.rest.operation` entries. */
export function bulkExportOperations(): { name: string; definition: string }[] {
  return OPERATIONS.map((operation) => ({ ...operation }));
}

/**
 * Adds Bulk Data export to a CapabilityStatement (returns a copy): `instantiates` the Bulk Data
 * CapabilityStatement, lists the system-level `export` operation in the first `rest` entry (created
 * when absent), and `export` on the `Patient` and `Group` resource entries with the
 * `patient-export` and `group-export` definitions (entries created when absent), as the operations
 * are invoked. Entries already present are not repeated.
 * @see https://hl7.org/fhir/uv/bulkdata/STU2/CapabilityStatement-bulk-data.html
 */
export function withBulkExportCapability<T extends object>(
  capabilityStatement: T,
): T & { instantiates: string[]; rest: Record<string, unknown>[] } {
  const copy = structuredClone(capabilityStatement) as Record<string, unknown>;
  const instantiates = Array.isArray(copy.instantiates) ? (copy.instantiates as string[]) : [];
  if (!instantiates.includes(BULK_DATA_CAPABILITY_STATEMENT))
    instantiates.push(BULK_DATA_CAPABILITY_STATEMENT);
  copy.instantiates = instantiates;
  const rest = Array.isArray(copy.rest) ? (copy.rest as Record<string, unknown>[]) : [];
  if (rest.length === 0) rest.push({ mode: 'server' });
  const server = rest[0]!;
  const { operations } = bulkExportCapability({ import: false });
  const resources = Array.isArray(server.resource) ? (server.resource as Record<string, unknown>[]) : [];
  for (const { resourceTypes, ...operation } of operations) {
    if (!resourceTypes) {
      addOperation(server, operation);
      continue;
    }
    for (const type of resourceTypes) {
      let entry = resources.find((r) => r.type === type);
      if (!entry) resources.push((entry = { type }));
      addOperation(entry, operation);
    }
  }
  if (resources.length > 0) server.resource = resources;
  copy.rest = rest;
  return copy as T & { instantiates: string[]; rest: Record<string, unknown>[] };
}

/** Adds `operation` to `owner.operation` unless one of the same name and definition is there. */
function addOperation(owner: Record<string, unknown>, operation: { name: string; definition: string }): void {
  const list = Array.isArray(owner.operation)
    ? (owner.operation as { name?: string; definition?: string }[])
    : [];
  const known = list.some(
    (o) => o.name === operation.name && (o.definition === undefined || o.definition === operation.definition),
  );
  if (!known) list.push({ ...operation });
  owner.operation = list;
}
