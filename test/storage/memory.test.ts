import { memoryStorage } from '../../src/storage/memory.js';
import { runStorageContract } from './contract.js';

runStorageContract('memoryStorage', () => {
  const storage = memoryStorage();
  return Promise.resolve({ storage, cleanup: () => storage.close() });
});
