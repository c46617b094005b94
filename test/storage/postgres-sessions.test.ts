import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { parseSearch } from '../../src/fhir/search-query.js';
import { postgresStorage } from '../../src/postgres.js';
import { postgresTestsEnabled, POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';

/*
 * The sessions a PostgreSQL store opens itself run with JIT off (pool-options.ts,
 * `SESSION_OPTIONS`): on a large store JIT compiled every search plan, for more time than the
 * search took.
 */

if (postgresTestsEnabled('postgresStorage sessions')) {
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
      const clients = new Set<pg.Client>();
      const query = pg.Client.prototype.query;
      const spy = function (this: pg.Client, ...args: unknown[]) {
        clients.add(this);
        return (query as (...a: unknown[]) => unknown).apply(this, args);
      };
      (pg.Client.prototype as unknown as { query: typeof spy }).query = spy;
      try {
        await storage.writeResources('p1', [
          { op: 'create', resource: { resourceType: 'Patient', id: 'ann', name: [{ family: 'Smith' }] } },
        ]);
        const parsed = await parseSearch('Patient', new URLSearchParams('name=smi'), {
          storeAnswersSearch: true,
        });
        expect((await storage.searchResources('p1', 'Patient', parsed.query)).total).toBe(1);
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect((await storage.searchResources('p1', 'Patient', parsed.query)).total).toBe(1);
      } finally {
        (pg.Client.prototype as unknown as { query: typeof query }).query = query;
      }
      try {
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
