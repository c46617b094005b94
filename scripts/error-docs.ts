/**
 * Writes the error-code table of docs/errors.md from `ERROR_TABLE` (`npm run docs:errors`);
 * test/http/error-model.test.ts checks that the page matches the table.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { ErrorCode } from '../src/errors.js';
import { ERROR_TABLE } from '../src/http/error-table.js';
import { tableCellsIn, withTable, type TableMarkers } from './generated-table.js';

export const ERRORS_PAGE = fileURLToPath(new URL('../docs/errors.md', import.meta.url));
export const TABLE_BEGIN = '<!-- error-codes:begin (generated from ERROR_TABLE by `npm run docs:errors`) -->';
export const TABLE_END = '<!-- error-codes:end -->';

const HEADER = ['Code', 'Status', 'FHIR `issue.code`', 'SCIM `scimType`', 'OAuth `error`', 'When'];
const NONE = '—';

/** The cells of the table: a header row, then one row per code, in `ERROR_TABLE` order. */
export function errorTableCells(): string[][] {
  const rows = (Object.keys(ERROR_TABLE) as ErrorCode[]).map((code) => {
    const row = ERROR_TABLE[code];
    return [
      `\`${code}\``,
      [row.status, ...(row.otherStatuses ?? [])].join(', '),
      `\`${row.issue}\``,
      row.scimType ? `\`${row.scimType}\`` : NONE,
      `\`${row.oauthError}\``,
      row.description,
    ];
  });
  return [HEADER, ...rows];
}

const MARKERS: TableMarkers = { begin: TABLE_BEGIN, end: TABLE_END };

/** The cells of the generated table in a page (formatting aside), or undefined without markers. */
export function errorTableCellsIn(page: string): string[][] | undefined {
  return tableCellsIn(page, MARKERS);
}

/** `page` with the generated table between the markers, formatted as Prettier would. */
export function withErrorTable(page: string): Promise<string> {
  return withTable(page, ERRORS_PAGE, MARKERS, errorTableCells());
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const page = readFileSync(ERRORS_PAGE, 'utf8');
  writeFileSync(ERRORS_PAGE, await withErrorTable(page));
  console.log(`Wrote the error table of ${ERRORS_PAGE}`);
}
