import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { now } from './stats.js';

const quoteIdent = (name: string): string => `"${name.replaceAll('"', '""')}"`;
const quoteLiteral = (value: string): string => `'${value.replaceAll("'", "''")}'`;

/**
 * The PostgreSQL export baseline: `COPY (SELECT body …) TO STDOUT` of the rows a system export of
 * `projectId` reads (every live current version of the exported `types`, in `seq` order), one
 * COPY and one file per resource type, as the export writes one file per type. Timed from the
 * first COPY to the last file flushed. COPY's text format escapes backslashes: the bytes are about those of the NDJSON.
 */
export async function copyRowsOut(options: {
  connectionString: string;
  schema: string;
  projectId: string;
  types: readonly string[];
  dir: string;
}): Promise<{ ms: number; rows: number; bytes: number }> {
  fs.rmSync(options.dir, { recursive: true, force: true });
  fs.mkdirSync(options.dir, { recursive: true });
  const client = new pg.Client({ connectionString: options.connectionString });
  await client.connect();
  try {
    const s = quoteIdent(options.schema);
    const project = quoteLiteral(options.projectId);
    const start = now();
    let rows = 0;
    let bytes = 0;
    for (const type of options.types) {
      const copy = client.query(
        copyTo(`COPY (SELECT body FROM ${s}.resources
                       WHERE project_id = ${project} AND resource_type = ${quoteLiteral(type)}
                         AND superseded_seq IS NULL AND NOT deleted
                       ORDER BY seq) TO STDOUT`),
      );
      const file = path.join(options.dir, `${type}.ndjson`);
      await pipeline(copy, fs.createWriteStream(file));
      rows += copy.rowCount ?? 0;
      bytes += fs.statSync(file).size;
    }
    return { ms: now() - start, rows, bytes };
  } finally {
    await client.end();
  }
}

/** Drops a benchmark schema and everything in it. */
export async function dropSchema(connectionString: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${quoteIdent(schema)} CASCADE`);
  } finally {
    await client.end();
  }
}
