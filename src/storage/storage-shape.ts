import { optionError } from '../common/options.js';
import type { Storage } from './types.js';

/** The members of `T` that are required functions (the optional `failureCounts`, … are left out). */
type RequiredMethods<T> = {
  [K in keyof T]-?: undefined extends T[K] ? never : T[K] extends (...args: never[]) => unknown ? K : never;
}[keyof T];

/** Every method of the `Storage` contract, listed once: the compiler keeps it in step with the interface. */
const STORAGE_METHODS: Record<RequiredMethods<Storage>, true> = {
  createProject: true,
  readProject: true,
  updateProject: true,
  createUser: true,
  readUser: true,
  updateUser: true,
  deleteUser: true,
  findUsers: true,
  listUsers: true,
  createMembership: true,
  listMemberships: true,
  deleteMembership: true,
  createClient: true,
  readClient: true,
  listClients: true,
  updateClient: true,
  createResource: true,
  readResource: true,
  updateResource: true,
  deleteResource: true,
  writeResources: true,
  searchResources: true,
  readResourceVersion: true,
  readHistory: true,
  transaction: true,
  deleteProject: true,
  listProjects: true,
  listSigningKeys: true,
  saveSigningKey: true,
  useOnce: true,
  createExportJob: true,
  readExportJob: true,
  updateExportJob: true,
  deleteExportJob: true,
  listExportJobs: true,
  exportSnapshot: true,
  releaseSnapshot: true,
  ping: true,
  close: true,
};

/**
 * Why `value` is not a `Storage`, or undefined when it has every method of the contract. A
 * factory given the promise of `fileStorage()` (without `await`) would otherwise start, and fail
 * at the first request with `storage.listExportJobs is not a function`.
 */
export function storageShapeProblem(value: unknown): string | undefined {
  if (typeof value !== 'object' || value === null) return `is ${value === null ? 'null' : typeof value}`;
  if (typeof (value as { then?: unknown }).then === 'function') {
    return (
      'is a Promise, not a Storage: fileStorage() opens its directory asynchronously, so await it ' +
      '(const storage = await fileStorage({ dir }))'
    );
  }
  const missing = Object.keys(STORAGE_METHODS).filter(
    (name) => typeof (value as Record<string, unknown>)[name] !== 'function',
  );
  if (missing.length === 0) return undefined;
  const shown = missing.slice(0, 5).join(', ');
  const more = missing.length > 5 ? ` and ${missing.length - 5} more` : '';
  return `is not a Storage: it has no method ${shown}${more} (see docs/storage.md)`;
}

/**
 * Requires `options.storage` (routers check it with the other shared options: `checkRouterOptions`),
 * shaped like a `Storage`: an object with every method of the contract,
 * and not a promise of one (the promise of `fileStorage()` passed without `await`).
 * @param label how the message names it
 * @default label 'storage'
 */
export function requireStorage(
  owner: string,
  options: { storage?: unknown } | undefined,
  label = 'storage',
): void {
  if (!options?.storage) optionError(owner, 'storage', `${label} is required`);
  const problem = storageShapeProblem(options.storage);
  if (problem) optionError(owner, 'storage', `${label} ${problem}`);
}
