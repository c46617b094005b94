import type { QueryResult, QueryResultRow } from 'pg';

/**
 * Runs one SQL statement with positional parameters. `prepare` names the statement so that each
 * connection parses and plans it once (for the hot lookups).
 */
export type Query = <R extends QueryResultRow = QueryResultRow>(
  text: string,
  values?: unknown[],
  prepare?: boolean,
) => Promise<QueryResult<R>>;
