import type { AuditDetails } from '../../http/request-recorder.js';
import type { FhirAccessEvent } from '../../audit/events.js';
import type { FhirResource, ResourceWrite, WriteResult } from '../../storage/types.js';
import { isPatientCompartmentType, patientCompartmentIds } from '../compartment.js';

/**
 * Most resources an event names one by one; a `count` says how many in all. Keeps an event of a
 * 10,000-entry Bundle or a million-line upload small.
 */
export const AUDITED_REFERENCES = 20;
/** Most patients a read or search event names (the rest of the answer's patients are left out). */
export const AUDITED_PATIENTS = 20;

export type WriteInteraction = 'create' | 'update' | 'delete';

/** What a read or search event says, without who and where. */
export type FhirAccessDetails = Omit<FhirAccessEvent, 'projectId' | 'actor' | 'address' | 'recorded'>;

/** Ids of the patients whose compartments `resources` are in, at most {@link AUDITED_PATIENTS}. */
export function patientsOf(resources: readonly FhirResource[]): string[] {
  const out: string[] = [];
  for (const resource of resources) {
    for (const id of patientCompartmentIds(resource)) {
      if (out.includes(id)) continue;
      out.push(id);
      if (out.length === AUDITED_PATIENTS) return out;
    }
  }
  return out;
}

/**
 * The event of a read (or vread) of `resource`, when it is patient-compartment data (its type may
 * be in a patient's compartment); undefined otherwise. Built from the resource the handler holds.
 */
export function readAccess(
  interaction: 'read' | 'vread',
  resource: FhirResource & { id: string; meta?: { versionId?: string } },
): FhirAccessDetails | undefined {
  if (!isPatientCompartmentType(resource.resourceType)) return undefined;
  const reference = `${resource.resourceType}/${resource.id}`;
  const versionId = resource.meta?.versionId;
  return {
    kind: 'fhir-access',
    interaction,
    resourceType: resource.resourceType,
    reference: interaction === 'vread' && versionId ? `${reference}/_history/${versionId}` : reference,
    patientIds: patientCompartmentIds(resource).slice(0, AUDITED_PATIENTS),
  };
}

/**
 * The event of a search of `resourceType` (`query`: the query string as sent, without `?`) that
 * answered `resources`, when the type is patient-compartment data; undefined otherwise.
 */
export function searchAccess(
  resourceType: string,
  query: string,
  resources: readonly FhirResource[],
): FhirAccessDetails | undefined {
  if (!isPatientCompartmentType(resourceType)) return undefined;
  return {
    kind: 'fhir-access',
    interaction: 'search-type',
    resourceType,
    query,
    count: resources.length,
    patientIds: patientsOf(resources),
  };
}

/** The reference of what a write stored (read from the stored text when there is one, not parsed). */
function referenceOf(write: ResourceWrite, result: WriteResult | undefined): string | undefined {
  if (write.op === 'delete') return `${write.resourceType}/${write.id}`;
  const stored = result?.stored;
  if (stored) return `${stored.resourceType}/${stored.id}`;
  const id = write.resource.id ?? result?.resource?.id;
  return id === undefined ? undefined : `${write.resource.resourceType}/${id}`;
}

/**
 * What one request (a batch or transaction Bundle, an NDJSON upload) did to patient data, collected
 * as it happens and recorded once at the end: one `fhir-write` event per interaction (the first
 * {@link AUDITED_REFERENCES} references and the exact count), one `fhir-access` event per read or
 * search entry of patient-compartment data.
 */
export class RequestActivity {
  readonly #writes = new Map<WriteInteraction, { references: string[]; count: number }>();
  readonly #accesses: FhirAccessDetails[] = [];

  /** One write applied (`result`: what the store answered for it). */
  wrote(write: ResourceWrite, result?: WriteResult): void {
    const interaction: WriteInteraction = write.op;
    let tally = this.#writes.get(interaction);
    if (!tally) this.#writes.set(interaction, (tally = { references: [], count: 0 }));
    tally.count++;
    if (tally.references.length < AUDITED_REFERENCES) {
      const reference = referenceOf(write, result);
      if (reference !== undefined) tally.references.push(reference);
    }
  }

  /** One read or search; `undefined` (not patient data) is ignored. */
  accessed(access: FhirAccessDetails | undefined): void {
    if (access) this.#accesses.push(access);
  }

  /** Takes in what `other` collected (a transaction's last, successful run). */
  absorb(other: RequestActivity): void {
    for (const [interaction, tally] of other.#writes) {
      let mine = this.#writes.get(interaction);
      if (!mine) this.#writes.set(interaction, (mine = { references: [], count: 0 }));
      mine.count += tally.count;
      for (const reference of tally.references) {
        if (mine.references.length < AUDITED_REFERENCES) mine.references.push(reference);
      }
    }
    this.#accesses.push(...other.#accesses);
  }

  /** The events to record: writes (create, update, delete order), then reads and searches. */
  events(): AuditDetails[] {
    const out: AuditDetails[] = [];
    for (const interaction of ['create', 'update', 'delete'] as const) {
      const tally = this.#writes.get(interaction);
      if (!tally) continue;
      out.push({ kind: 'fhir-write', interaction, references: tally.references, count: tally.count });
    }
    out.push(...this.#accesses);
    return out;
  }
}
