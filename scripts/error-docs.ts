/**
 * Writes the error-code table of docs/errors.md from `ERROR_TABLE` (`npm run docs:errors`);
 * test/http/error-model.test.ts checks that the page matches the table.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { format, resolveConfig } from 'prettier';
import type { ErrorCode } from '../src/errors.js';
import { ERROR_TABLE } from '../src/http/error-table.js';

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

/** The cells of the generated table in a page (formatting aside), or undefined without markers. */
export function errorTableCellsIn(page: string): string[][] | undefined {
  const begin = page.indexOf(TABLE_BEGIN);
  const end = page.indexOf(TABLE_END);
  if (begin < 0 || end < begin) return undefined;
  return page
    .slice(begin + TABLE_BEGIN.length, end)
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.startsWith('|') && !/^\|[\s|:-]+\|$/.test(line))
    .map((line) =>
      line
        .slice(1, -1)
        .split('|')
        .map((cell) => cell.trim()),
    );
}

/** `page` with the generated table between the markers, formatted as Prettier would. */
export async function withErrorTable(page: string): Promise<string> {
  const begin = page.indexOf(TABLE_BEGIN);
  const end = page.indexOf(TABLE_END);
  if (begin < 0 || end < begin)
    throw new Error(`docs/errors.md has no ${TABLE_BEGIN} … ${TABLE_END} markers`);
  const [header, ...rows] = errorTableCells();
  const line = (cells: string[]) => `| ${cells.join(' | ')} |`;
  const table = [line(header!), line(header!.map(() => '---')), ...rows.map(line)].join('\n');
  const text = `${page.slice(0, begin)}${TABLE_BEGIN}\n\n${table}\n\n${page.slice(end)}`;
  const options = (await resolveConfig(ERRORS_PAGE)) ?? {};
  return format(text, { ...options, filepath: ERRORS_PAGE });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const page = readFileSync(ERRORS_PAGE, 'utf8');
  writeFileSync(ERRORS_PAGE, await withErrorTable(page));
  console.log(`Wrote the error table of ${ERRORS_PAGE}`);
}
