import { vi } from 'vitest';
import type { Storage } from '../../src/storage/types.js';

/**
 * Makes `createUser` fail inside every transaction of `storage`, after the project was written
 * (spies on `transaction` and on each transaction's operations); `createdProjects` collects the
 * ids of the projects the failed transactions wrote.
 */
export function failUserCreation(storage: Storage): { createdProjects: string[] } {
  const createdProjects: string[] = [];
  const transaction = storage.transaction.bind(storage);
  vi.spyOn(storage, 'transaction').mockImplementation((fn) =>
    transaction((tx) => {
      const createProject = tx.createProject.bind(tx);
      vi.spyOn(tx, 'createProject').mockImplementation(async (...args) => {
        const project = await createProject(...args);
        createdProjects.push(project.id);
        return project;
      });
      vi.spyOn(tx, 'createUser').mockRejectedValue(new Error('injected failure'));
      return fn(tx);
    }),
  );
  return { createdProjects };
}
