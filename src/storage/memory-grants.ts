import type { GrantFilter, GrantKind, GrantRecord, GrantStore } from './grant-types.js';

/** Grant kinds `revoke` removes. */
export const REVOCABLE_GRANT_KINDS: readonly GrantKind[] = ['ticket', 'code', 'refresh', 'family'];

/** Whether `grant` matches `filter` (and is of a kind `revoke` removes). */
export function grantMatches(grant: GrantRecord, filter: GrantFilter): boolean {
  return (
    REVOCABLE_GRANT_KINDS.includes(grant.kind) &&
    grant.projectId === filter.projectId &&
    (filter.userId === undefined || grant.userId === filter.userId) &&
    (filter.clientId === undefined || grant.clientId === filter.clientId) &&
    (filter.family === undefined || grant.family === filter.family)
  );
}

/**
 * Grants in this process's memory (the memory store's, and the file store's for the kinds it
 * does not write to disk). Every operation changes the map synchronously inside the call, so
 * `take`, `use`, `extend` and `revoke` are atomic within the process. `onChange` hears of every change (the file store
 * persists from it).
 */
export class MemoryGrants implements GrantStore {
  private readonly grants = new Map<string, GrantRecord>();
  private sizeAtPurge = 0;

  constructor(
    private readonly onChange: (kind: GrantKind) => Promise<void> = () => Promise.resolve(),
    private readonly now: () => number = Date.now,
  ) {}

  private live(kind: GrantKind, key: string): GrantRecord | undefined {
    const id = `${kind}\u0000${key}`;
    const grant = this.grants.get(id);
    if (grant && grant.expiresAt <= this.now()) {
      this.grants.delete(id);
      return undefined;
    }
    return grant;
  }

  /** Drops expired records once the map has doubled since the last purge. */
  private purge(): void {
    if (this.grants.size < 1024 || this.grants.size < this.sizeAtPurge * 2) return;
    const now = this.now();
    for (const [id, grant] of this.grants) if (grant.expiresAt <= now) this.grants.delete(id);
    this.sizeAtPurge = this.grants.size;
  }

  /** Every unexpired record of `kinds` (what the file store writes). */
  entries(kinds: readonly GrantKind[]): GrantRecord[] {
    const now = this.now();
    return [...this.grants.values()].filter((g) => kinds.includes(g.kind) && g.expiresAt > now);
  }

  /** Loads records without telling `onChange` (the file store at open). */
  load(grants: readonly GrantRecord[]): void {
    for (const grant of grants) this.grants.set(`${grant.kind}\u0000${grant.key}`, grant);
  }

  async put(grant: GrantRecord): Promise<void> {
    this.purge();
    this.grants.set(`${grant.kind}\u0000${grant.key}`, structuredClone(grant));
    await this.onChange(grant.kind);
  }

  get(kind: GrantKind, key: string): Promise<GrantRecord | undefined> {
    const grant = this.live(kind, key);
    return Promise.resolve(grant && structuredClone(grant));
  }

  async take(kind: GrantKind, key: string): Promise<GrantRecord | undefined> {
    const grant = this.live(kind, key);
    if (!grant) return undefined;
    this.grants.delete(`${kind}\u0000${key}`);
    await this.onChange(kind);
    return structuredClone(grant);
  }

  async use(kind: GrantKind, key: string): Promise<{ grant: GrantRecord; firstUse: boolean } | undefined> {
    const grant = this.live(kind, key);
    if (!grant) return undefined;
    const firstUse = grant.used !== true;
    grant.used = true;
    if (firstUse) await this.onChange(kind);
    return { grant: structuredClone(grant), firstUse };
  }

  async extend(kind: GrantKind, key: string, expiresAt: number): Promise<boolean> {
    const grant = this.live(kind, key);
    if (!grant) return false;
    if (expiresAt > grant.expiresAt) {
      grant.expiresAt = expiresAt;
      await this.onChange(kind);
    }
    return true;
  }

  async revoke(filter: GrantFilter): Promise<number> {
    const kinds = new Set<GrantKind>();
    let removed = 0;
    for (const [id, grant] of this.grants) {
      if (!grantMatches(grant, filter)) continue;
      this.grants.delete(id);
      kinds.add(grant.kind);
      removed++;
    }
    for (const kind of kinds) await this.onChange(kind);
    return removed;
  }
}
