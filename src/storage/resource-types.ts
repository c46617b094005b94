/*
 * The FHIR resource as the storage contract holds it (see `./types.ts`).
 */

/** A FHIR R4 resource as plain JSON. */
export interface FhirResource {
  resourceType: string;
  id?: string;
  meta?: FhirMeta;
  [key: string]: unknown;
}

export interface FhirMeta {
  versionId?: string;
  lastUpdated?: string;
  [key: string]: unknown;
}

/** A stored resource always has an id and `meta.versionId` / `meta.lastUpdated`. */
export interface StoredResource extends FhirResource {
  id: string;
  meta: FhirMeta & { versionId: string; lastUpdated: string };
}
