import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { quoteIdentifier } from '../../src/storage/postgres/schema.js';
import type { Storage, UserListOptions } from '../../src/storage/types.js';
import { POSTGRES_URL, schemaFactory } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';

/** The statements `fn` sends that read `users`, with their parameters. */
async function userStatements(fn: () => Promise<unknown>): Promise<{ text: string; values: unknown[] }[]> {
  const query = vi.spyOn(pg.Client.prototype, 'query');
  try {
    await fn();
    const out: { text: string; values: unknown[] }[] = [];
    for (const [arg, values] of query.mock.calls as unknown as [unknown, unknown[]][]) {
      const config =
        typeof arg === 'string' ? { text: arg, values } : (arg as { text: string; values: unknown[] });
      if (/FROM \S+\.users/.test(config.text)) out.push({ text: config.text, values: config.values });
    }
    return out;
  } finally {
    query.mockRestore();
  }
}

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  Plans?: PlanNode[];
}

function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}

if (postgresTestUrl('postgres user pages') && POSTGRES_URL) {
  const connectionString = POSTGRES_URL;
  const freshSchema = schemaFactory(connectionString);

  describe('postgres user pages', () => {
    let admin: pg.Pool;
    let storage: Storage;
    let schema: string;
    beforeAll(async () => {
      admin = new pg.Pool({ connectionString, max: 2 });
      schema = freshSchema();
      storage = postgresStorage({ connectionString, schema });
      await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
      const s = quoteIdentifier(schema);
      // 3000 users written straight into the table (the store's own insert is what the contract
      // suite covers): enough for the planner to prefer the indexes.
      await storage.createUser('p1', {
        projectId: 'p1',
        userName: 'First@Example.org',
        userType: 'Practitioner',
        profileId: 'prof-first',
        active: true,
        data: { emails: [{ value: 'First@Example.org' }] },
      });
      await admin.query(
        `INSERT INTO ${s}.users (project_id, id, user_name_key, external_id, profile_id, created_at, version, record, updated_at, emails)
         SELECT 'p1', 'u' || lpad(i::text, 5, '0'), 'user' || i, CASE WHEN i % 2 = 0 THEN 'ext' || i END, 'prof' || i,
                '2026-01-01T00:00:00.000Z', 1,
                json_build_object('id', 'u' || lpad(i::text, 5, '0'), 'projectId', 'p1', 'userName', 'user' || i,
                  'userType', 'Practitioner', 'profileId', 'prof' || i, 'active', true, 'data', json_build_object(),
                  'createdAt', '2026-01-01T00:00:00.000Z', 'updatedAt', '2026-01-01T00:00:00.000Z', 'version', 1),
                '2026-01-01T00:00:00.000Z', ARRAY['user' || i || '@example.org']
           FROM generate_series(1, 3000) AS i`,
      );
      await admin.query(`ANALYZE ${s}.users`);
    });
    afterAll(async () => {
      await storage.close();
      await admin.end();
    });

    it('answers a page after a cursor, and the total, from the indexes (no sequential scan, no sort)', async () => {
      const cases: [UserListOptions, RegExp][] = [
        [{ count: 100 }, /users_by_created/],
        [{ sortBy: 'userName', sortOrder: 'descending', count: 100 }, /users_by_user_name/],
        [{ sortBy: 'externalId', count: 100 }, /users_by_external_id/],
        [{ sortBy: 'updatedAt', count: 100 }, /users_by_updated/],
      ];
      for (const [options, index] of cases) {
        const first = await storage.listUsers('p1', options);
        expect(first.total).toBe(3001);
        const statements = await userStatements(() =>
          storage.listUsers('p1', { ...options, after: first.next! }),
        );
        const page = statements.find((st) => /ORDER BY/.test(st.text))!;
        expect(page).toBeDefined();
        const { rows } = await admin.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
          `EXPLAIN (FORMAT JSON) ${page.text}`,
          page.values,
        );
        const nodes = nodesOf(rows[0]!['QUERY PLAN'][0]!.Plan);
        expect(nodes.map((n) => n['Node Type'])).not.toContain('Seq Scan');
        expect(nodes.map((n) => n['Node Type'])).not.toContain('Sort');
        expect(nodes.some((n) => index.test(n['Index Name'] ?? ''))).toBe(true);
      }
    });

    it('looks users up by email through its index', async () => {
      const filter = { attribute: 'email', eq: 'USER77@example.org' } as const;
      const page = await storage.listUsers('p1', { filter, count: 10 });
      expect(page.users.map((u) => u.id)).toEqual(['u00077']);
      const statements = await userStatements(() => storage.listUsers('p1', { filter, count: 10 }));
      for (const st of statements) {
        const { rows } = await admin.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
          `EXPLAIN (FORMAT JSON) ${st.text}`,
          st.values,
        );
        const nodes = nodesOf(rows[0]!['QUERY PLAN'][0]!.Plan);
        expect(nodes.map((n) => n['Node Type'])).not.toContain('Seq Scan');
      }
    });

    it('migration 6 fills the listing columns of users written before it', async () => {
      const s = quoteIdentifier(schema);
      await admin.query(`UPDATE ${s}.users SET updated_at = NULL, emails = NULL`);
      await admin.query(`DELETE FROM ${s}.schema_migrations WHERE version = 6`);
      const reopened = postgresStorage({ connectionString, schema });
      try {
        const page = await reopened.listUsers('p1', {
          filter: { attribute: 'email', eq: 'first@EXAMPLE.org' },
          count: 5,
        });
        expect(page.users.map((u) => u.userName)).toEqual(['First@Example.org']);
        const byUpdate = await reopened.listUsers('p1', {
          sortBy: 'updatedAt',
          sortOrder: 'descending',
          count: 1,
        });
        expect(byUpdate.users[0]!.userName).toBe('First@Example.org');
        const { rows } = await admin.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM ${s}.users WHERE updated_at IS NULL OR emails IS NULL`,
        );
        expect(rows[0]!.n).toBe(0);
      } finally {
        await reopened.close();
      }
    });
  });
}
