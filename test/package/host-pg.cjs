// PostgreSQL host (CommonJS): `require('fhir-platform-kit/postgres')` with `pg` installed by the host.
'use strict';
const express = require('express');
const pg = require('pg');
const kit = require('fhir-platform-kit');
const { postgresStorage } = require('fhir-platform-kit/postgres');
const { runFlow } = require('./flow.cjs');

const connectionString = process.env.FPK_TEST_POSTGRES_URL;
const schema = `fpk_package_cjs_${process.pid}`;

async function main() {
  try {
    await runFlow(kit, express, `PostgreSQL (CJS), Express ${process.env.EXPRESS_MAJOR}`, () =>
      Promise.resolve(postgresStorage({ connectionString, schema })),
    );
  } finally {
    const admin = new pg.Pool({ connectionString, max: 1 });
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
