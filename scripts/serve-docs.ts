/**
 * Writes the table of `serve`'s flags and environment variables, from `SERVE_SETTINGS`, into
 * docs/settings.md (`npm run docs:serve`), the one page that holds it (the README and
 * docs/getting-started.md link to it); test/cli/serve-settings.test.ts checks that the page matches.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { serveSettings } from '../src/cli/serve-settings.js';
import { tableCellsIn, withTable, type TableMarkers } from './generated-table.js';

/** The pages holding the table, with the path their links are relative to (the repository root or docs/). */
export const SERVE_DOCS_PAGES = [
  { file: fileURLToPath(new URL('../docs/settings.md', import.meta.url)), linksFrom: 'docs/' },
];
export const TABLE_BEGIN =
  '<!-- serve-settings:begin (generated from SERVE_SETTINGS by `npm run docs:serve`) -->';
export const TABLE_END = '<!-- serve-settings:end -->';

const HEADER = ['Variable', 'Flag', 'Default', 'Meaning'];
const STORE = { file: 'File store only: ', postgres: 'PostgreSQL only: ' } as const;

/**
 * The cells of the table: a header row, then one row per setting. `linksFrom` is the page's
 * directory: a description's link to `docs/x.md` becomes `x.md` in a page of docs/.
 */
export function serveTableCells(linksFrom = ''): string[][] {
  const rows = serveSettings().map(([, setting]) => {
    const description = setting.description.replace(/\]\(([^)]+)\)/g, (_, target: string) =>
      linksFrom && target.startsWith(linksFrom) ? `](${target.slice(linksFrom.length)})` : `](${target})`,
    );
    return [
      `\`${setting.env}\``,
      `\`${setting.flag}\``,
      setting.defaultText === undefined ? 'unset' : `\`${setting.defaultText}\``,
      `${setting.store ? STORE[setting.store] : ''}${description}`,
    ];
  });
  return [HEADER, ...rows];
}

const MARKERS: TableMarkers = { begin: TABLE_BEGIN, end: TABLE_END };

/** The cells of the generated table in a page (formatting aside), or undefined without markers. */
export function serveTableCellsIn(page: string): string[][] | undefined {
  return tableCellsIn(page, MARKERS);
}

/** `page` with the generated table between the markers, formatted as Prettier would. */
export function withServeTable(page: string, file: string, linksFrom: string): Promise<string> {
  return withTable(page, file, MARKERS, serveTableCells(linksFrom));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  for (const { file, linksFrom } of SERVE_DOCS_PAGES) {
    writeFileSync(file, await withServeTable(readFileSync(file, 'utf8'), file, linksFrom));
    console.log(`Wrote the serve settings table of ${file}`);
  }
}
