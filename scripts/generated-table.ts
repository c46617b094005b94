/**
 * A Markdown table a script generates between two marker comments of a page (docs:errors,
 * docs:serve): writing it, and reading its cells back for the tests that check a page is current.
 */
import { format, resolveConfig } from 'prettier';

/** The markers around a generated table. */
export interface TableMarkers {
  begin: string;
  end: string;
}

/**
 * The cells of the generated table in a page (formatting aside), or undefined without markers.
 * Cells split on `|` not escaped with a backslash.
 */
export function tableCellsIn(page: string, markers: TableMarkers): string[][] | undefined {
  const begin = page.indexOf(markers.begin);
  const end = page.indexOf(markers.end);
  if (begin < 0 || end < begin) return undefined;
  return page
    .slice(begin + markers.begin.length, end)
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line.startsWith('|') && !/^\|[\s|:-]+\|$/.test(line))
    .map((line) =>
      line
        .slice(1, -1)
        .split(/(?<!\\)\|/)
        .map((cell) => cell.trim()),
    );
}

/**
 * `page` (the text of `file`) with `cells` (a header row, then the rows) as the table between the
 * markers, formatted as Prettier formats `file`.
 * @throws Error when the page lacks the markers.
 */
export async function withTable(
  page: string,
  file: string,
  markers: TableMarkers,
  cells: string[][],
): Promise<string> {
  const begin = page.indexOf(markers.begin);
  const end = page.indexOf(markers.end);
  if (begin < 0 || end < begin) throw new Error(`${file} has no ${markers.begin} … ${markers.end} markers`);
  const [header, ...rows] = cells;
  const line = (row: string[]) => `| ${row.join(' | ')} |`;
  const table = [line(header!), line(header!.map(() => '---')), ...rows.map(line)].join('\n');
  const text = `${page.slice(0, begin)}${markers.begin}\n\n${table}\n\n${page.slice(end)}`;
  const options = (await resolveConfig(file)) ?? {};
  return format(text, { ...options, filepath: file });
}
