import type { Storage } from '../../src/storage/types.js';
import { postgresStorage } from '../../src/postgres.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import { schemaFactory } from './pg-schema.js';
import { postgresTestUrl } from './postgres.js';
import { tempDir } from './temp-dir.js';

/**
 * Declares `suite` once per store, each opening stores of its own: memory; file (a temporary
 * directory each, removed after the test file); PostgreSQL (a schema each, dropped after the test
 * file) when `FPK_TEST_POSTGRES_URL` is set, a failing test in its place under CI otherwise.
 * @param name what the PostgreSQL placeholder names
 */
export function forEachStore(
  name: string,
  suite: (store: string, open: () => Storage | Promise<Storage>) => void,
): void {
  suite('memory', () => memoryStorage());
  suite('file', () => fileStorage({ dir: tempDir('fpk-store-'), durability: 'write' }));
  const url = postgresTestUrl(`${name}: PostgreSQL`);
  if (url) {
    const newSchema = schemaFactory(url);
    suite('PostgreSQL', () => postgresStorage({ connectionString: url, schema: newSchema() }));
  }
}
