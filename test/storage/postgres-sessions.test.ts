import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { allReads } from '../helpers/search-reads.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/*
 * The sessions a PostgreSQL store opens itself run with JIT off (pool-options.ts,
 * `SESSION_OPTIONS`): on a large store JIT compiled every search plan, for more time than the
 * search took.
 */

if (postgresTestUrl('postgresStorage sessions')) {
  const connectionString = POSTGRES_URL!;
  const newSchema = schemaFactory(connectionString);

  describe('postgresStorage sessions', () => {
    it('run with JIT off, on the primary and on a replica', async () => {
      // The database itself as its own "replica": a second pool the store routes reads to.
      const storage = postgresStorage({
        connectionString,
        schema: newSchema(),
        readReplicas: [connectionString],
      });
      const query = vi.spyOn(pg.Client.prototype, 'query');
      const poolQuery = vi.spyOn(pg.Pool.prototype, 'query');
      const poolConnect = vi.spyOn(pg.Pool.prototype, 'connect');
      let clients: Set<pg.Client>;
      let pools: Set<pg.Pool>;
      try {
        await storage.writeResources('p1', [
          { op: 'create', resource: { resourceType: 'Patient', id: 'ann', name: [{ family: 'Smith' }] } },
        ]);
        const parsed = await parseSearch('Patient', new URLSearchParams('name=smi'), {}, allReads());
        expect((await storage.searchResources('p1', 'Patient', parsed.query)).total).toBe(1);
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect((await storage.searchResources('p1', 'Patient', parsed.query)).total).toBe(1);
        // The clients the store's statements ran on.
        clients = new Set(query.mock.contexts as pg.Client[]);
        pools = new Set([...poolQuery.mock.contexts, ...poolConnect.mock.contexts] as pg.Pool[]);
      } finally {
        query.mockRestore();
        poolQuery.mockRestore();
        poolConnect.mockRestore();
      }
      try {
        // The primary's pool and the replica's.
        expect(pools.size).toBe(2);
        expect(clients.size).toBeGreaterThan(0);
        for (const client of clients) {
          const { rows } = await client.query<{ jit: string }>('SHOW jit');
          expect(rows[0]!.jit).toBe('off');
        }
      } finally {
        await storage.close();
      }
      // A connection of the database's own defaults, for contrast.
      const plain = new pg.Client({ connectionString });
      await plain.connect();
      try {
        const { rows } = await plain.query<{ jit: string }>('SHOW jit');
        expect(rows[0]!.jit).toBe('on');
      } finally {
        await plain.end();
      }
    });
  });
}
