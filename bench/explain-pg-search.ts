/**
 * `npx tsx bench/explain-pg-search.ts --schema S 'Type?query' …`: the plan (`EXPLAIN (ANALYZE,
 * BUFFERS)`) of the statement the PostgreSQL store runs for each search, against project `bench`
 * of schema `S` (a schema `measure-pg-search.ts` loaded). A diagnostic for the search benches.
 *
 *   --schema NAME  schema (required)
 *   --project P    project (default bench)
 *   --plan-only    `EXPLAIN` without running the statement (for statements that take minutes)
 *   --sql          print each statement and its bind values before its plan
 */
import { parseArgs } from 'node:util';
import pg from 'pg';
import { parseSearch } from '../src/fhir/search/search-query.js';
import { postgresStorage } from '../src/postgres.js';
import { SESSION_OPTIONS } from '../src/storage/postgres/pool-options.js';
import { allReads } from '../test/helpers/search-reads.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    schema: { type: 'string' },
    project: { type: 'string', default: 'bench' },
    'plan-only': { type: 'boolean', default: false },
    sql: { type: 'boolean', default: false },
  },
});
const url = process.env.FPK_BENCH_POSTGRES_URL ?? process.env.FPK_TEST_POSTGRES_URL;
if (!url || !values.schema) throw new Error('Set FPK_TEST_POSTGRES_URL and --schema');
const storage = postgresStorage({ connectionString: url, schema: values.schema, statementTimeoutMs: 0 });
// The store's session settings (JIT off): the plans are those its statements get.
const admin = new pg.Pool({ connectionString: url, max: 1, options: SESSION_OPTIONS });
try {
  await storage.ping(); // The tables are ready before any statement is recorded.
  for (const search of positionals) {
    const [type, q = ''] = search.split('?') as [string, string?];
    // The bench's costly searches pass the router's default bounds (bench/measure-costly-searches.ts).
    const limits = { maxSortKeys: 20, maxFilters: 100, maxOffset: 1_000_000 };
    const parsed = await parseSearch(type, new URLSearchParams(q), { limits }, allReads());
    const seen: { text: string; values: unknown[] }[] = [];
    const proto = pg.Client.prototype as unknown as Record<'query', (...args: unknown[]) => unknown>;
    const original = proto.query;
    // Record the statements of one search (the store's pool uses pg.Client).
    proto.query = function (this: pg.Client, ...args: unknown[]) {
      const [text, params] = args as [unknown, unknown[] | undefined];
      if (typeof text === 'string' && /search_|resources/.test(text)) {
        seen.push({ text, values: params ?? [] });
        // With --plan-only the search's statement is not run: it answers no rows.
        if (values['plan-only']) return original.apply(this, ['SELECT NULL WHERE false', ...args.slice(2)]);
      }
      return original.apply(this, args);
    };
    try {
      await storage.searchResources(values.project, type, parsed.query);
    } finally {
      proto.query = original;
    }
    for (const statement of seen) {
      if (values.sql) console.log(`--- SQL\n${statement.text}\n${JSON.stringify(statement.values)}`);
      const { rows } = await admin.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN ${values['plan-only'] ? '' : '(ANALYZE, BUFFERS) '}${statement.text}`,
        statement.values,
      );
      console.log(`--- ${search}\n${rows.map((r) => r['QUERY PLAN']).join('\n')}`);
    }
  }
} finally {
  await storage.close();
  await admin.end();
}
