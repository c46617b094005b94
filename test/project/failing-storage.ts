import type { Storage, StorageOperations } from '../../src/storage/types.js';

function bound(target: object, prop: string | symbol): unknown {
  const value = Reflect.get(target, prop) as unknown;
  return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
}

/**
 * Wraps `base` so that, inside `transaction`, `createUser` fails after the project was written;
 * `createdProjects` collects the ids of the projects the failed transactions wrote.
 */
export function failingUserCreation(base: Storage): { storage: Storage; createdProjects: string[] } {
  const createdProjects: string[] = [];
  const wrapTx = (tx: StorageOperations): StorageOperations =>
    new Proxy(tx, {
      get(target, prop) {
        if (prop === 'createProject') {
          return async (...args: Parameters<StorageOperations['createProject']>) => {
            const project = await target.createProject(...args);
            createdProjects.push(project.id);
            return project;
          };
        }
        if (prop === 'createUser') return () => Promise.reject(new Error('injected failure'));
        return bound(target, prop);
      },
    });
  const storage = new Proxy(base, {
    get(target, prop) {
      if (prop === 'transaction') {
        return <T>(fn: (tx: StorageOperations) => Promise<T>) => target.transaction((tx) => fn(wrapTx(tx)));
      }
      return bound(target, prop);
    },
  });
  return { storage, createdProjects };
}
