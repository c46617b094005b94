// PostgreSQL host (TypeScript, compiled to ESM): `fhir-platform-kit/postgres` with `pg` installed
// by the host (an optional peer dependency), the same flow on a fresh schema, then the schema dropped.
import express from 'express';
import * as kit from 'fhir-platform-kit';
import { postgresStorage, type PostgresStorageOptions } from 'fhir-platform-kit/postgres';
import { createRequire } from 'node:module';
import pg from 'pg';

const require = createRequire(import.meta.url);
const { runFlow } = require('./flow.cjs') as {
  runFlow: (
    lib: typeof kit,
    host: typeof express,
    label: string,
    openStorage: () => Promise<kit.Storage>,
  ) => Promise<void>;
};

const connectionString = process.env.FPK_TEST_POSTGRES_URL ?? '';
const schema = `fpk_package_${process.pid}`;
const options: PostgresStorageOptions = { connectionString, schema };
try {
  await runFlow(kit, express, `PostgreSQL (TypeScript/ESM), Express ${process.env.EXPRESS_MAJOR}`, () =>
    Promise.resolve(postgresStorage(options)),
  );
} finally {
  const admin = new pg.Pool({ connectionString, max: 1 });
  await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await admin.end();
}
