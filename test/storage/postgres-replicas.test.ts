import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { SearchTooCostlyError } from '../../src/storage/errors.js';
import { lsnValue } from '../../src/storage/postgres/replicas.js';
import type { Storage } from '../../src/storage/types.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { eventually } from '../helpers/eventually.js';
import { replicaUnavailable, startReplica, type Replica } from '../helpers/pg-replica.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

describe('lsnValue', () => {
  it('orders WAL positions as PostgreSQL does', () => {
    expect(lsnValue('0/0')).toBe(0n);
    expect(lsnValue('16/B374D848')).toBe((0x16n << 32n) + 0xb374d848n);
    expect(lsnValue('1/0') > lsnValue('0/FFFFFFFF')).toBe(true);
  });
});

describe('readReplicas option', () => {
  it('must be a list of connection strings', () => {
    for (const readReplicas of ['postgres://x', [''], [1], {}]) {
      expect(() =>
        postgresStorage({ connectionString: 'postgres://x', readReplicas: readReplicas as string[] }),
      ).toThrow(expect.objectContaining({ code: 'ERR_INVALID_OPTION' }) as Error);
    }
  });
});

const enabled = postgresTestUrl('postgres read replicas') && POSTGRES_URL;
if (enabled) {
  const connectionString = enabled;
  const freshSchema = schemaFactory(connectionString);
  const why = await replicaUnavailable(connectionString);
  if (why && !process.env.CI) console.warn(`Skipping the read replica tests: ${why}`);

  describe.skipIf(why !== undefined && !process.env.CI)(
    'postgres read replicas (a real streaming replica)',
    () => {
      let replica: Replica;
      let admin: pg.Pool;
      let schema: string;
      let writer: Storage;
      const stores: Storage[] = [];
      const withReplica = () => {
        const store = postgresStorage({ connectionString, schema, readReplicas: [replica.url] });
        stores.push(store);
        return store;
      };
      const patient = (id: string) => ({ resourceType: 'Patient', id });
      const found = (store: Storage, id: string) =>
        store.readResource('p1', 'Patient', id).then(
          () => true,
          (error: { code?: string }) => {
            if (error.code === 'ERR_STORAGE_NOT_FOUND') return false;
            throw error;
          },
        );

      beforeAll(async () => {
        if (why) throw new Error(`the read replica tests cannot run here: ${why}`);
        admin = new pg.Pool({ connectionString, max: 2 });
        replica = await startReplica(connectionString);
        schema = freshSchema();
        writer = postgresStorage({ connectionString, schema });
        await writer.createProject({ id: 'p1', name: 'One', strictMode: false });
        await replica.caughtUp(admin);
      });
      afterAll(async () => {
        for (const store of stores) await store.close();
        await writer?.close();
        await admin?.end();
        await replica?.destroy();
      });

      it('reads on the replica, and a store reads its own writes on the primary while the replica lags', async () => {
        const reader = withReplica();
        await writer.createResource('p1', patient('before'));
        await replica.caughtUp(admin);
        expect(await found(reader, 'before')).toBe(true);
        await replica.pauseReplay();
        try {
          // Another instance's write: the replica has not replayed it, and the reader's reads go there.
          await writer.createResource('p1', patient('other'));
          expect(await found(reader, 'other')).toBe(false);
          expect((await reader.searchResources('p1', 'Patient', {})).resources.map((r) => r.id)).toEqual([
            'before',
          ]);
          // Its own write: every later read runs where that write is (the primary), which has the other too.
          await reader.createResource('p1', patient('own'));
          expect(await found(reader, 'own')).toBe(true);
          expect(await found(reader, 'other')).toBe(true);
          const user = await reader.createUser('p1', {
            projectId: 'p1',
            userName: 'ann',
            userType: 'Practitioner',
            profileId: 'own',
            active: true,
            data: {},
          });
          expect(
            (await reader.listUsers('p1', { filter: { attribute: 'userName', eq: 'ANN' }, count: 5 })).users,
          ).toEqual([user]);
          // A transaction's commit counts as a write too.
          await reader.transaction(async (tx) => {
            await tx.createResource('p1', patient('in-tx'));
          });
          expect(await found(reader, 'in-tx')).toBe(true);
        } finally {
          await replica.resumeReplay();
        }
        // Once the replica has replayed the reader's writes, its reads go back there.
        await replica.caughtUp(admin);
        await replica.pauseReplay();
        try {
          await writer.createResource('p1', patient('later'));
          expect(await found(reader, 'own')).toBe(true);
          expect(await found(reader, 'later')).toBe(false);
        } finally {
          await replica.resumeReplay();
        }
      });

      it("with replicaFreshness 'primary', a read sees every write committed before it, through any instance", async () => {
        const reader = postgresStorage({
          connectionString,
          schema,
          readReplicas: [replica.url],
          replicaFreshness: 'primary',
        });
        stores.push(reader);
        await replica.caughtUp(admin);
        await replica.pauseReplay();
        try {
          // Written through another instance while the replica lags: the reader has written nothing,
          // yet the primary's position is ahead of the replica's, so the primary answers.
          await writer.createResource('p1', patient('elsewhere'));
          expect(await found(reader, 'elsewhere')).toBe(true);
          expect((await reader.searchResources('p1', 'Patient', {})).resources.map((r) => r.id)).toContain(
            'elsewhere',
          );
          // The same read through a store with the default freshness runs on the lagging replica.
          const instance = withReplica();
          expect(await found(instance, 'elsewhere')).toBe(false);
        } finally {
          await replica.resumeReplay();
        }
      });

      it('refuses an unknown replicaFreshness', () => {
        expect(() =>
          postgresStorage({
            connectionString,
            schema,
            readReplicas: [replica.url],
            replicaFreshness: 'eventual' as 'primary',
          }),
        ).toThrow(/replicaFreshness must be 'instance' or 'primary'/);
      });

      it('holds searches on a replica to the search lane, and cancels one there at its deadline', async () => {
        // A pool of 4: 2 connections for searches, 1 per project (on each replica too).
        const reader = postgresStorage({
          connectionString,
          schema,
          readReplicas: [replica.url],
          maxConnections: 4,
        });
        stores.push(reader);
        await writer.createProject({ id: 'p2', name: 'Two', strictMode: false });
        for (const project of ['p1', 'p2'])
          await writer.createResource(project, {
            resourceType: 'Observation',
            id: 'weighed',
            status: 'final',
            code: { text: 'weight' },
            valueQuantity: { value: 7 },
          });
        await writer.createResource('p1', patient('lane'));
        await replica.caughtUp(admin);
        const quantity = await parseSearch(
          'Observation',
          new URLSearchParams('value-quantity=7'),
          {},
          allReads(),
        );
        const search = (project: string, deadline: number) =>
          reader.searchResources(project, 'Observation', { ...quantity.query, deadline });
        // Locked on the primary, and so on the replica once it replays the lock: searches reading
        // search_numbers wait there.
        const lock = await admin.connect();
        let locked = true;
        const unlock = async () => {
          if (!locked) return;
          locked = false;
          await lock.query('ROLLBACK');
          lock.release();
        };
        try {
          await lock.query('BEGIN');
          await lock.query(`LOCK TABLE "${schema}".search_numbers IN ACCESS EXCLUSIVE MODE`);
          // A commit flushes the WAL that holds the lock's record, so that the replica gets it now.
          await admin.query('SELECT pg_current_xact_id()');
          await eventually('the replica holding the lock it replayed', async () => {
            const { rows } = await replica.query(
              `SELECT 1 FROM pg_locks WHERE relation = $1::regclass AND mode = 'AccessExclusiveLock' AND granted`,
              [`"${schema}".search_numbers`],
            );
            return rows.length > 0;
          });
          const stuck = async () =>
            (
              await replica.query<{ pid: number }>(
                `SELECT pid FROM pg_stat_activity
                  WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%search_numbers%'`,
                [schema],
              )
            ).rows;
          const held = Array.from({ length: 6 }, () => search('p1', Date.now() + 120_000));
          await eventually('a search of p1 waiting on the replica', async () => (await stuck()).length > 0);
          // A point read finds a replica connection: p1's searches hold one, as their share.
          expect(await found(reader, 'lane')).toBe(true);
          expect(await stuck()).toHaveLength(1);
          // p2's search runs beside it on the replica, which has no statement timeout of its own:
          // its deadline cancels it.
          await expect(search('p2', Date.now() + 500)).rejects.toBeInstanceOf(SearchTooCostlyError);
          expect(await stuck()).toHaveLength(1);
          await unlock();
          const pages = await Promise.all(held);
          expect(pages.map((p) => p.resources.map((r) => r.id))).toEqual(Array(6).fill(['weighed']));
        } finally {
          await unlock();
        }
      });

      it('a replica that goes away: reads fall back to the primary', async () => {
        const reader = withReplica();
        await writer.createResource('p1', patient('while-down'));
        replica.kill();
        try {
          expect(await found(reader, 'while-down')).toBe(true);
          expect((await reader.listUsers('p1', { count: 10 })).total).toBe(1);
        } finally {
          replica.start();
        }
        await replica.caughtUp(admin);
      });

      it('a promoted replica is no longer read: it does not follow the primary any more', async () => {
        const reader = withReplica();
        await replica.caughtUp(admin);
        expect(await found(reader, 'before')).toBe(true);
        replica.promote();
        await writer.createResource('p1', patient('after-promotion'));
        expect(await found(reader, 'after-promotion')).toBe(true);
        const { rows } = await replica.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM "${schema}".resources WHERE id = 'after-promotion'`,
        );
        expect(rows[0]!.n).toBe(0);
      });
    },
  );
}
