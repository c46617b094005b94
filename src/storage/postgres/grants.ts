import type { GrantFilter, GrantKind, GrantRecord, GrantStore } from '../grant-types.js';
import { REVOCABLE_GRANT_KINDS } from '../memory-grants.js';
import type { Executor } from './executor.js';

/** Expired grants are deleted once every this many `put` calls. */
const PURGE_EVERY = 256;

interface GrantRow {
  record: GrantRecord;
  used: boolean;
}

function withUsed(row: GrantRow): GrantRecord {
  return { ...row.record, ...(row.used ? { used: true } : {}) };
}

/**
 * Grants in the `oauth_grants` table (migration 9), shared by every instance on the database.
 * `take` is one `DELETE … RETURNING`, `use` one `UPDATE … RETURNING` reading the row it locked,
 * `extend` one `UPDATE` and `revoke` one `DELETE`, so of two instances racing on one code or refresh
 * token exactly one wins, and a family revoked is never extended afterwards. Times are each
 * instance's clock, as for `useOnce` (grants live minutes to days, far above clock drift).
 */
export class PostgresGrants implements GrantStore {
  private puts = 0;

  constructor(
    private readonly exec: Executor,
    /** The quoted schema. */
    private readonly s: string,
  ) {}

  async put(grant: GrantRecord): Promise<void> {
    if (++this.puts % PURGE_EVERY === 0) {
      await this.exec.run('write', (query) =>
        query(`DELETE FROM ${this.s}.oauth_grants WHERE expires_at <= $1`, [Date.now()]),
      );
    }
    const { used, ...record } = grant;
    await this.exec.run('write', (query) =>
      query(
        `INSERT INTO ${this.s}.oauth_grants
           (kind, key, project_id, client_id, user_id, family, expires_at, used, record)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (kind, key) DO UPDATE SET project_id = excluded.project_id,
           client_id = excluded.client_id, user_id = excluded.user_id, family = excluded.family,
           expires_at = excluded.expires_at, used = excluded.used, record = excluded.record`,
        [
          grant.kind,
          grant.key,
          grant.projectId,
          grant.clientId,
          grant.userId ?? null,
          grant.family ?? null,
          Math.ceil(grant.expiresAt),
          used === true,
          JSON.stringify(record),
        ],
        true,
      ),
    );
  }

  get(kind: GrantKind, key: string): Promise<GrantRecord | undefined> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<GrantRow>(
        `SELECT record, used FROM ${this.s}.oauth_grants WHERE kind = $1 AND key = $2 AND expires_at > $3`,
        [kind, key, Date.now()],
        true,
      );
      return rows[0] && withUsed(rows[0]);
    });
  }

  take(kind: GrantKind, key: string): Promise<GrantRecord | undefined> {
    return this.exec.run('write', async (query) => {
      const { rows } = await query<GrantRow>(
        `DELETE FROM ${this.s}.oauth_grants WHERE kind = $1 AND key = $2 AND expires_at > $3
         RETURNING record, used`,
        [kind, key, Date.now()],
        true,
      );
      return rows[0] && withUsed(rows[0]);
    });
  }

  use(kind: GrantKind, key: string): Promise<{ grant: GrantRecord; firstUse: boolean } | undefined> {
    return this.exec.run('write', async (query) => {
      // The sub-select locks the row and reads `used` as it was; a racing call waits for the lock
      // and then reads the row as this one left it (READ COMMITTED re-reads a locked row).
      const { rows } = await query<GrantRow & { was_used: boolean }>(
        `UPDATE ${this.s}.oauth_grants g SET used = true
           FROM (SELECT kind, key, used AS was_used FROM ${this.s}.oauth_grants
                  WHERE kind = $1 AND key = $2 AND expires_at > $3 FOR UPDATE) old
          WHERE g.kind = old.kind AND g.key = old.key
         RETURNING g.record, g.used, old.was_used`,
        [kind, key, Date.now()],
        true,
      );
      const row = rows[0];
      return row && { grant: withUsed(row), firstUse: !row.was_used };
    });
  }

  extend(kind: GrantKind, key: string, expiresAt: number): Promise<boolean> {
    return this.exec.run('write', async (query) => {
      // One statement locking the row: against a racing `revoke` (one DELETE), either this runs
      // first and the DELETE then removes the row, or it finds the row gone (READ COMMITTED re-reads
      // a row it waited for) and answers false.
      const { rowCount } = await query(
        `UPDATE ${this.s}.oauth_grants
            SET expires_at = GREATEST(expires_at, $3::bigint),
                record = jsonb_set(record::jsonb, '{expiresAt}', to_jsonb(GREATEST(expires_at, $3::bigint)))::json
          WHERE kind = $1 AND key = $2 AND expires_at > $4`,
        [kind, key, Math.ceil(expiresAt), Date.now()],
        true,
      );
      return (rowCount ?? 0) > 0;
    });
  }

  revoke(filter: GrantFilter): Promise<number> {
    return this.exec.run('write', async (query) => {
      const { rowCount } = await query(
        `DELETE FROM ${this.s}.oauth_grants
          WHERE kind = ANY($1::text[]) AND project_id = $2
            AND ($3::text IS NULL OR user_id = $3) AND ($4::text IS NULL OR client_id = $4)
            AND ($5::text IS NULL OR family = $5)`,
        [
          REVOCABLE_GRANT_KINDS,
          filter.projectId,
          filter.userId ?? null,
          filter.clientId ?? null,
          filter.family ?? null,
        ],
      );
      return rowCount ?? 0;
    });
  }
}
