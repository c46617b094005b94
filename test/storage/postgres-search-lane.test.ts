// Issue 44 on PostgreSQL: one project's slow searches cannot take the pool from everything else
// (point reads, writes, the token endpoint's records, readiness, other projects' searches), its
// further searches wait for its own share in order, and a search's deadline cancels its statement
// with SearchTooCostlyError on a connection that serves the next query.
//
// A search is made slow by a lock the test holds: `Observation?value-quantity=5` reads
// `search_numbers`, which the test locks (ACCESS EXCLUSIVE), so the search's statement waits for
// it (visible in pg_stat_activity) until the test lets go; nothing project B does reads that table.
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage, type PostgresStorageOptions } from '../../src/postgres.js';
import { SearchTooCostlyError, StorageUnavailableError } from '../../src/storage/errors.js';
import type { ResourcePage, ResourceQuery, Storage } from '../../src/storage/types.js';
import { eventually } from '../helpers/eventually.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

if (postgresTestUrl('PostgreSQL search lane')) {
  const connectionString = POSTGRES_URL!;
  const newSchema = schemaFactory(connectionString);
  const admin = new pg.Pool({ connectionString, max: 4 });
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(() => admin.end());

  /**
   * A small pool: by default 2 of its 4 connections for searches (1 per project), 2 for everything
   * else (the defaults, so that the same test runs on a store without a lane and fails there).
   */
  const SMALL: PostgresStorageOptions = {
    maxConnections: 4,
    // Searches wait on the test's lock as long as it holds it (no lock_timeout).
    lockTimeoutMs: 0,
    // On a pool held whole by searches, a point read fails after this.
    acquireTimeoutMs: 3000,
  };

  /** A store in a fresh schema with projects `a` and `b`, each with one Observation and one Patient. */
  async function open(options: PostgresStorageOptions): Promise<{ storage: Storage; schema: string }> {
    const schema = newSchema();
    const storage = postgresStorage({ connectionString, schema, ...options });
    cleanups.push(() => storage.close());
    await seed(storage);
    return { storage, schema };
  }

  async function seed(storage: Storage): Promise<void> {
    for (const project of ['a', 'b']) {
      await storage.createProject({ id: project, name: project, strictMode: false });
      await storage.writeResources(project, [
        {
          op: 'create',
          resource: {
            resourceType: 'Observation',
            id: 'o1',
            status: 'final',
            code: { text: 'weight' },
            valueQuantity: { value: 5 },
          },
        },
        { op: 'create', resource: { resourceType: 'Patient', id: 'p1', gender: 'male' } },
      ]);
    }
  }

  async function searchQuery(type: string, query: string, deadline?: number): Promise<ResourceQuery> {
    const parsed = await parseSearch(type, new URLSearchParams(query), {}, allReads());
    return { ...parsed.query, ...(deadline !== undefined ? { deadline } : {}) };
  }

  /** A search that waits for the test's lock on `search_numbers`. */
  async function slowSearch(storage: Storage, project: string, deadline?: number): Promise<ResourcePage> {
    return storage.searchResources(
      project,
      'Observation',
      await searchQuery('Observation', 'value-quantity=5', deadline),
    );
  }

  /** Locks `schema`'s `search_numbers` until the returned function is called. */
  async function lockNumbers(schema: string): Promise<() => Promise<void>> {
    const client = await admin.connect();
    await client.query('BEGIN');
    await client.query(`LOCK TABLE "${schema}".search_numbers IN ACCESS EXCLUSIVE MODE`);
    let released = false;
    const release = async () => {
      if (released) return;
      released = true;
      await client.query('ROLLBACK');
      client.release();
    };
    cleanups.push(release);
    return release;
  }

  /** The backends running a search that waits for the test's lock (their statements read search_numbers). */
  async function stuckSearches(schema: string): Promise<number[]> {
    const { rows } = await admin.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()
          AND query LIKE '%' || $1 || '%search_numbers%'`,
      [schema],
    );
    return rows.map((r) => r.pid);
  }

  /** Tracks the order in which labelled promises settle. */
  function settleOrder(): {
    order: string[];
    track: <T>(label: string, promise: Promise<T>) => Promise<T>;
  } {
    const order: string[] = [];
    return {
      order,
      track: (label, promise) => {
        void promise.then(
          () => order.push(label),
          () => order.push(`${label} failed`),
        );
        return promise;
      },
    };
  }

  const far = () => Date.now() + 120_000;

  describe('PostgreSQL search lane', () => {
    it("keeps point reads, writes, the token endpoint's records, ping and another project's search going while one project's searches are stuck", async () => {
      const { storage, schema } = await open(SMALL);
      await storage.createClient({
        id: 'b-client',
        projectId: 'b',
        name: 'b',
        scope: 'system/*.*',
        admin: false,
        superAdmin: false,
      });
      await storage.grants!.put({
        kind: 'code',
        key: 'b-code',
        projectId: 'b',
        clientId: 'b-client',
        expiresAt: Date.now() + 600_000,
        data: {},
      });
      const release = await lockNumbers(schema);
      const { order, track } = settleOrder();
      // More of project a's searches than the pool has connections (with a far deadline each, so
      // that none gives up while the test holds the lock).
      const searches = ['a1', 'a2', 'a3', 'a4', 'a5', 'a6'].map((label) =>
        track(label, slowSearch(storage, 'a', far())),
      );
      const [stuck] = await eventually('a search of project a waiting for the lock', async () => {
        const pids = await stuckSearches(schema);
        return pids.length > 0 && pids;
      });

      // Everything of project b goes on meanwhile, on the connections searches cannot take.
      expect((await storage.readResource('b', 'Patient', 'p1')).id).toBe('p1');
      const [written] = await storage.writeResources('b', [
        { op: 'create', resource: { resourceType: 'Patient', gender: 'female' } },
      ]);
      expect(written!.resource!.meta.versionId).toBe('1');
      await storage.ping();
      expect((await storage.readClient('b-client')).projectId).toBe('b');
      expect((await storage.grants!.get('code', 'b-code'))?.clientId).toBe('b-client');
      expect((await storage.readResourceVersion('b', 'Patient', 'p1', '1')).id).toBe('p1');
      await storage.failureCounts!.add(['b-client'], 60_000);
      expect((await storage.failureCounts!.get(['b-client']))[0]?.failures).toBe(1);
      expect(await storage.useOnce('b-jti', Date.now() + 60_000)).toBe(true);
      // And b's search runs in the lane beside a's one.
      const page = await storage.searchResources('b', 'Patient', await searchQuery('Patient', 'gender=male'));
      expect(page.resources.map((r) => r.id)).toEqual(['p1']);

      // a's first search was stuck all along, alone: its others wait for its share.
      expect(await stuckSearches(schema)).toEqual([stuck]);
      expect(order).toEqual([]);

      await release();
      const pages = await Promise.all(searches);
      expect(pages.map((p) => p.resources.map((r) => r.id))).toEqual(Array(6).fill(['o1']));
      // One at a time, in the order they came.
      expect(order).toEqual(['a1', 'a2', 'a3', 'a4', 'a5', 'a6']);
    });

    it("runs a project's history listing in the lane, a resource's history outside it", async () => {
      const { storage, schema } = await open(SMALL);
      const release = await lockNumbers(schema);
      const { order, track } = settleOrder();
      const search = track('search', slowSearch(storage, 'a', far()));
      await eventually(
        'the search waiting for the lock',
        async () => (await stuckSearches(schema)).length === 1,
      );
      const typeHistory = track('type history', storage.readHistory('a', { type: 'Observation', count: 10 }));
      const projectHistory = track('project history', storage.readHistory('a', { count: 10 }));
      // A resource's history is a point read: not held back by the project's searches.
      const own = await storage.readHistory('a', { type: 'Observation', id: 'o1', count: 10 });
      expect(own.entries).toHaveLength(1);
      // b's type history has its own share.
      expect((await storage.readHistory('b', { type: 'Patient', count: 10 })).entries).toHaveLength(1);
      expect(order).toEqual([]);
      await release();
      await Promise.all([search, typeHistory, projectHistory]);
      expect(order).toEqual(['search', 'type history', 'project history']);
    });

    it("fails a search whose deadline passes while its project's searches hold its share with SearchTooCostlyError", async () => {
      const { storage, schema } = await open(SMALL);
      await lockNumbers(schema);
      const stuck = slowSearch(storage, 'a', far());
      stuck.catch(() => undefined);
      await eventually(
        'the search waiting for the lock',
        async () => (await stuckSearches(schema)).length === 1,
      );
      const late = storage.searchResources(
        'a',
        'Patient',
        await searchQuery('Patient', 'gender=male', Date.now() + 300),
      );
      const error = await late.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SearchTooCostlyError);
      expect((error as Error).message).toMatch(/project's searches hold all 1 of its search connections/);
      // It never reached the database: still only the first one there.
      expect(await stuckSearches(schema)).toHaveLength(1);
    });

    it('runs a search inside a transaction on its connection, outside the lane', async () => {
      const { storage, schema } = await open(SMALL);
      const release = await lockNumbers(schema);
      const stuck = slowSearch(storage, 'a', far());
      await eventually(
        'the search waiting for the lock',
        async () => (await stuckSearches(schema)).length === 1,
      );
      const ids = await storage.transaction(async (tx) => {
        const page = await tx.searchResources('a', 'Patient', await searchQuery('Patient', 'gender=male'));
        // Through the store in the transaction's flow: its connection too.
        const again = await storage.searchResources(
          'a',
          'Patient',
          await searchQuery('Patient', 'gender=male'),
        );
        return [...page.resources, ...again.resources].map((r) => r.id);
      });
      expect(ids).toEqual(['p1', 'p1']);
      await release();
      await stuck;
    });

    it('cancels a slow search at its deadline with SearchTooCostlyError, and its connection serves the next query', async () => {
      // A pool of the test's own, to see its connections (idle ones kept): 1 for searches, 1 for the rest.
      const pool = new pg.Pool({ connectionString, max: 2, idleTimeoutMillis: 0 });
      cleanups.push(() => pool.end());
      const schema = newSchema();
      const storage = postgresStorage({ pool, schema });
      cleanups.push(() => storage.close());
      await seed(storage);
      const { rows: before } = await admin.query<{ timeout: string }>(
        `SELECT current_setting('statement_timeout') AS timeout`,
      );
      const release = await lockNumbers(schema);
      const connections = pool.totalCount;
      const taken: pg.PoolClient[] = [];
      pool.on('acquire', (client) => taken.push(client));

      const error = await slowSearch(storage, 'a', Date.now() + 500).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SearchTooCostlyError);
      // Cancelled by the statement timeout, while it waited for the lock the test still holds.
      expect((error as Error).cause).toMatchObject({ code: '57014' });
      expect(taken).toHaveLength(1);

      // The connection went back to the pool, neither kept out nor destroyed.
      expect([pool.totalCount, pool.idleCount]).toEqual([connections, connections]);
      await release();
      // Every connection of the pool, the cancelled search's among them, answers outside any
      // transaction with the session's own statement_timeout (the deadline's ended with it).
      const clients = await Promise.all(Array.from({ length: connections }, () => pool.connect()));
      try {
        expect(clients).toContain(taken[0]);
        for (const client of clients) {
          const { rows } = await client.query<{ timeout: string; open: boolean }>(
            `SELECT current_setting('statement_timeout') AS timeout,
                    now() <> statement_timestamp() AS open`,
          );
          expect(rows).toEqual([{ timeout: before[0]!.timeout, open: false }]);
        }
      } finally {
        for (const client of clients) client.release();
      }
      // And the next search answers.
      expect((await slowSearch(storage, 'a', Date.now() + 60_000)).resources.map((r) => r.id)).toEqual([
        'o1',
      ]);
    });

    it("keeps the store's statement timeout (503) for a search without a deadline or with a later one", async () => {
      const { storage, schema } = await open({ ...SMALL, statementTimeoutMs: 300 });
      await lockNumbers(schema);
      await expect(slowSearch(storage, 'a')).rejects.toBeInstanceOf(StorageUnavailableError);
      await expect(slowSearch(storage, 'a', Date.now() + 60_000)).rejects.toBeInstanceOf(
        StorageUnavailableError,
      );
      // A deadline before it: the search's own.
      await expect(slowSearch(storage, 'b', Date.now() + 100)).rejects.toBeInstanceOf(SearchTooCostlyError);
    });

    it('cancels a slow search inside a transaction at its deadline, and the transaction fails', async () => {
      const { storage, schema } = await open(SMALL);
      const release = await lockNumbers(schema);
      const outcome = storage
        .transaction(async (tx) => {
          await tx.searchResources(
            'a',
            'Observation',
            await searchQuery('Observation', 'value-quantity=5', Date.now() + 300),
          );
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(await outcome).toBeInstanceOf(SearchTooCostlyError);
      await release();
      // One that meets its deadline answers, and the transaction goes on and commits.
      const ids = await storage.transaction(async (tx) => {
        const page = await tx.searchResources(
          'a',
          'Observation',
          await searchQuery('Observation', 'value-quantity=5', Date.now() + 60_000),
        );
        await tx.writeResources('a', [{ op: 'create', resource: { resourceType: 'Patient', id: 'p2' } }]);
        return page.resources.map((r) => r.id);
      });
      expect(ids).toEqual(['o1']);
      expect((await storage.readResource('a', 'Patient', 'p2')).id).toBe('p2');
    });
  });
}
