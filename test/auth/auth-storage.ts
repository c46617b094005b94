import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';

/** A memory store holding the projects `ids` (each named after its id), as the auth tests start. */
export async function storageWithProjects(...ids: string[]): Promise<Storage> {
  const storage = memoryStorage();
  for (const id of ids) await storage.createProject({ id, name: id, strictMode: false });
  return storage;
}
