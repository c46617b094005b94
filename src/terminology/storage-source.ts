import { typeSearch, type ParameterFilter } from '../storage/search-request.js';
import type { FhirResource, StorageOperations } from '../storage/types.js';
import type { TerminologySource } from './terminology-types.js';
import { compareVersions } from './version-order.js';

/** The most resources of one url read to pick the newest version (more is a misuse of versions). */
const VERSIONS_READ = 1000;

/**
 * The {@link TerminologySource} of project `projectId` over `storage` (the caller's view of the
 * store: its scopes apply): `CodeSystem` and `ValueSet` resources found by their `url` search
 * parameter (and `version`, when asked), the newest version when none is asked (by version order,
 * then `meta.lastUpdated`). Reads are cached for the source's life (one request). `check` guards
 * every read: the caller's right to search the type.
 * @see https://hl7.org/fhir/R4/codesystem.html#search
 */
export function storageTerminologySource(
  storage: StorageOperations,
  projectId: string,
  /** Called before each read of a type: throws when the caller may not search it (a 403). */
  check?: (type: 'CodeSystem' | 'ValueSet') => void,
): TerminologySource {
  const found = new Map<string, Promise<FhirResource | undefined>>();
  const search = async (
    type: 'CodeSystem' | 'ValueSet',
    filters: ParameterFilter[],
  ): Promise<FhirResource[]> => {
    const page = await storage.searchResources(projectId, type, {
      search: typeSearch(type, filters),
      count: VERSIONS_READ,
      total: 'none',
    });
    return page.resources;
  };
  return {
    key: projectId,
    find(type, url, version) {
      check?.(type);
      const key = `${type}|${url}|${version ?? ''}`;
      let read = found.get(key);
      if (!read) {
        const filters = [uriFilter(url), ...(version === undefined ? [] : [versionFilter(version)])];
        read = search(type, filters).then(newest);
        found.set(key, read);
      }
      return read;
    },
  };
}

function uriFilter(url: string): ParameterFilter {
  return { kind: 'parameter', code: 'url', type: 'uri', values: [{ type: 'uri', value: url }] };
}

function versionFilter(version: string): ParameterFilter {
  return { kind: 'parameter', code: 'version', type: 'token', values: [{ type: 'token', code: version }] };
}

/** The newest of `resources`: the highest version, then the latest update. */
function newest(resources: readonly FhirResource[]): FhirResource | undefined {
  let best: FhirResource | undefined;
  for (const resource of resources) {
    if (!best || newer(resource, best)) best = resource;
  }
  return best;
}

function newer(a: FhirResource, b: FhirResource): boolean {
  const order = compareVersions(versionOf(a), versionOf(b));
  if (order !== 0) return order > 0;
  return String(a.meta?.lastUpdated ?? '') > String(b.meta?.lastUpdated ?? '');
}

function versionOf(resource: FhirResource): string | undefined {
  return typeof resource.version === 'string' ? resource.version : undefined;
}
