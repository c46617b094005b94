import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll } from 'vitest';

/** The test database (`FPK_TEST_POSTGRES_URL`), or undefined when the PostgreSQL tests are off. */
export const POSTGRES_URL = process.env.FPK_TEST_POSTGRES_URL;

/** SQLSTATEs of a drop that lost a race with another test file's DDL: worth trying again. */
const RETRIED = new Set(['40P01', '40001', '55P03']);

/** Drops `schema` and everything in it, again after a deadlock with concurrent DDL (up to 5 tries). */
async function dropSchema(admin: pg.Pool, schema: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await admin.query(`DROP SCHEMA IF EXISTS "${schema.replaceAll('"', '""')}" CASCADE`);
      return;
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (attempt >= 5 || code === undefined || !RETRIED.has(code)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
    }
  }
}

/**
 * Fresh schema names for one test file, dropped (with everything in them) when its tests end.
 * Call at the top level of a file whose tests are enabled.
 */
export function schemaFactory(connectionString: string): () => string {
  const schemas: string[] = [];
  afterAll(async () => {
    const admin = new pg.Pool({ connectionString, max: 1 });
    try {
      for (const schema of schemas) await dropSchema(admin, schema);
    } finally {
      await admin.end();
    }
  });
  return () => {
    const schema = `fpk_test_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    return schema;
  };
}
