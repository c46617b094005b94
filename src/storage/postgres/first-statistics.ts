import type { Executor } from './executor.js';

/** Resource versions written through a store before it gathers the first statistics itself. */
export const FIRST_STATISTICS_AFTER = 1_000;

/**
 * Gathers the planner's first statistics of a schema's `resources` table (`ANALYZE`), once, after
 * the store has written {@link FIRST_STATISTICS_AFTER} resource versions, unless PostgreSQL has
 * them already. Autovacuum gathers them too, but only on its next round (a minute apart by
 * default), and until then the planner has none: it took the current versions' lookup of a write
 * (`applyResourceWrites`) to `resources_history`, filtering a whole type's versions for each
 * resource written, which made every batch of audit events scan all the audit events of its
 * project while holding the project's writers back (several seconds a batch on the Synthea
 * sample; docs/performance.md, "Search on PostgreSQL"). With statistics it looks each one up by
 * its id (`resources_current`, or `resources_history_instance`). In the background, through the
 * pool; a failure (a role that may not analyze the table) is left to autovacuum.
 */
export class FirstStatistics {
  private written = 0;
  private started = false;

  constructor(
    private readonly exec: Executor,
    private readonly s: string,
  ) {}

  /** Counts `count` resource versions written (and committed). */
  note(count: number): void {
    if (this.started) return;
    this.written += count;
    if (this.written < FIRST_STATISTICS_AFTER) return;
    this.started = true;
    this.exec
      .run('write', async (query) => {
        const { rows } = await query<{ gathered: boolean }>(
          `SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL AS gathered
             FROM pg_stat_user_tables WHERE relid = $1::regclass`,
          [`${this.s}.resources`],
        );
        if (rows[0]?.gathered !== true) await query(`ANALYZE ${this.s}.resources`);
      })
      .catch(() => undefined);
  }
}
