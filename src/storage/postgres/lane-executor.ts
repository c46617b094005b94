import type { AsyncLocalStorage } from 'node:async_hooks';
import type { ExecutionKind, Executor, Query, SearchRun, TransactionMarker } from './executor.js';
import type { SearchLane } from './search-lane.js';

/**
 * The store's executor with its search lane: a search (a run given a `SearchRun`) first waits for
 * room in the lane, then runs on `inner` (the primary, or the replicas); everything else runs at
 * once. A search inside a transaction function runs on the transaction's connection, outside the
 * lane: that connection is already held, and waiting for the lane while holding it (and its
 * locks) could hold back the searches the lane waits for.
 */
export class LaneExecutor implements Executor {
  constructor(
    private readonly lane: SearchLane,
    private readonly inner: Executor,
    private readonly transactionScope: AsyncLocalStorage<TransactionMarker>,
  ) {}

  async run<T>(kind: ExecutionKind, fn: (query: Query) => Promise<T>, search?: SearchRun): Promise<T> {
    if (search === undefined || this.transactionScope.getStore()?.open) {
      return this.inner.run(kind, fn, search);
    }
    const release = await this.lane.acquire(search.projectId, search.deadline);
    try {
      return await this.inner.run(kind, fn, search);
    } finally {
      release();
    }
  }
}
