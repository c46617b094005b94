import { afterEach, beforeEach, describe } from 'vitest';
import type { Storage } from '../storage/types.js';
import { auditStorageContract } from './audit-contract.js';
import { grantsStorageContract } from './grants-contract.js';
import { historyStorageContract } from './history-contract.js';
import { recordsStorageContract } from './records-contract.js';
import { identifierSearchStorageContract } from './identifier-search-contract.js';
import { resourcesStorageContract } from './resources-contract.js';
import { searchFiltersStorageContract } from './search-filters-contract.js';
import { searchTotalStorageContract } from './search-total-contract.js';
import { transactionsStorageContract } from './transactions-contract.js';
import { userListStorageContract } from './user-list-contract.js';

// The storage contract suite, shipped as `fhir-platform-kit/testing` so that an adapter's author
// can run it (with vitest) against their adapter. The package's own adapters run it in test/storage.

/** What a contract run needs from an adapter: a fresh, empty store and how to dispose of it. */
export type MakeStorage = () => Promise<{ storage: Storage; cleanup: () => Promise<void> }>;

export { collect, collectNdjson } from './contract-helpers.js';

/**
 * The storage contract: every adapter runs this suite. `makeStorage` returns a fresh, empty store
 * and a cleanup that closes it and removes whatever it created.
 */
export function runStorageContract(name: string, makeStorage: MakeStorage): void {
  describe(`storage contract: ${name}`, () => {
    let storage: Storage;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      ({ storage, cleanup } = await makeStorage());
    });
    afterEach(async () => {
      await cleanup();
    });

    auditStorageContract(() => storage);

    recordsStorageContract(() => storage);
    resourcesStorageContract(() => storage);
    identifierSearchStorageContract(() => storage);
    searchTotalStorageContract(() => storage);
    searchFiltersStorageContract(() => storage);
    transactionsStorageContract(() => storage);
    userListStorageContract(() => storage);
    historyStorageContract(() => storage);
    grantsStorageContract(() => storage);
  });
}
