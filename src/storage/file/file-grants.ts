import path from 'node:path';
import type { GrantKind, GrantRecord } from '../grant-types.js';
import { MemoryGrants } from '../memory-grants.js';
import { DurableJsonFile } from './durable-json-file.js';

/** The kinds written to disk: the long-lived ones. Tickets and codes live a minute or two. */
const PERSISTED: readonly GrantKind[] = ['refresh', 'family', 'revoked-token'];

interface GrantsFile {
  grants: GrantRecord[];
}

/**
 * What `grants.json` holds of `grants` now (its long-lived kinds, unexpired): a backup writes it
 * as it was when the store was frozen.
 */
export function grantsFileText(grants: MemoryGrants): string {
  return JSON.stringify({ grants: grants.entries(PERSISTED) } satisfies GrantsFile);
}

/**
 * The file store's grants: in memory, with refresh tokens, families and revoked token ids also
 * written to `grants.json` in the store directory (rewritten whole, durably, after each change of
 * those kinds; concurrent changes share one write). The file store is one process (its lock), so the
 * in-memory `take`, `use`, `extend` and `revoke` are atomic. Tickets and codes are not written: a
 * restart ends the sign-ins under way, which the user starts again.
 */
export async function openFileGrants(dir: string, sync: boolean): Promise<MemoryGrants> {
  const file = new DurableJsonFile<GrantsFile>(path.join(dir, 'grants.json'), sync);
  let writing: Promise<void> | undefined;
  let again = false;

  async function writeLoop(): Promise<void> {
    do {
      again = false;
      await file.write({ grants: grants.entries(PERSISTED) } satisfies GrantsFile);
    } while (again);
  }

  // A change made while a write runs is in the next one: its caller waits for that.
  function persist(kind: GrantKind): Promise<void> {
    if (!PERSISTED.includes(kind)) return Promise.resolve();
    if (writing) {
      again = true;
      return writing;
    }
    writing = writeLoop().finally(() => {
      writing = undefined;
    });
    return writing;
  }

  const grants: MemoryGrants = new MemoryGrants(persist);
  const stored = await file.read();
  const now = Date.now();
  grants.load((stored?.grants ?? []).filter((g) => g.expiresAt > now));
  return grants;
}
