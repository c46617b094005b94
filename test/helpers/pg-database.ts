import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll } from 'vitest';

/**
 * Fresh, empty databases on the server of `connectionString`, for servers that work in a
 * database's `public` schema (`serve` with `DATABASE_URL`); dropped, whatever still connects to
 * them, when the file's tests end. Call at the top level of a file whose tests are enabled.
 */
export function databaseFactory(connectionString: string): () => Promise<string> {
  const created: string[] = [];
  const admin = () => new pg.Pool({ connectionString, max: 1 });
  afterAll(async () => {
    const pool = admin();
    try {
      for (const name of created) await pool.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    } finally {
      await pool.end();
    }
  });
  return async () => {
    const name = `fpk_test_${randomBytes(6).toString('hex')}`;
    const pool = admin();
    try {
      await pool.query(`CREATE DATABASE "${name}"`);
    } finally {
      await pool.end();
    }
    created.push(name);
    const url = new URL(connectionString);
    url.pathname = `/${name}`;
    return url.href;
  };
}
