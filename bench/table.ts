import type { BenchResults } from './benchmark.js';

function format(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  return Math.abs(value) >= 1000 ? Math.round(value).toLocaleString('en-US') : String(value);
}

const verdict = (f: { target?: string; pass?: boolean } | undefined): string =>
  f?.target ? `${f.target} ${f.pass ? 'ok' : 'MISSED'}` : '';

/** Rows as aligned text; columns `numeric` are right-aligned. */
function grid(header: string[], rows: string[][], numeric: (i: number) => boolean): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (numeric(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)];
}

function storeLine(meta: BenchResults['meta']): string {
  return `store: ${meta.store}${meta.store === 'file' ? ` (durability ${meta.durability})` : ''}${meta.workerExports ? ' (exports in worker threads)' : ' (exports in the main thread)'}; N = ${meta.patients} patients; ${meta.options.reps} reps (medians); took ${Math.round(meta.durationMs / 1000)} s`;
}

/** The figures as one plain-text table, with the run's machine and options above it. */
export function renderTable(results: BenchResults): string {
  const { meta } = results;
  const rows = results.figures.map((f) => [f.label, format(f.value), f.unit, verdict(f)]);
  return [
    `fhir-platform-kit benchmark, ${meta.date}`,
    `node ${meta.node}, ${meta.cpus} CPUs (${meta.cpuModel}), ${meta.platform}`,
    storeLine(meta),
    '',
    ...grid(['Figure', 'Value', 'Unit', 'Target'], rows, (i) => i === 1),
  ].join('\n');
}

type Found = BenchResults['figures'][number] | undefined;

/** Every figure of `runs`, in the order they first appear, with each run's own (or undefined). */
function merged(runs: BenchResults[]): { label: string; unit: string; found: Found[] }[] {
  const keys: string[] = [];
  const labels = new Map<string, { label: string; unit: string }>();
  for (const run of runs) {
    for (const f of run.figures) {
      if (!labels.has(f.key)) keys.push(f.key);
      labels.set(f.key, { label: f.label, unit: f.unit });
    }
  }
  const byKey = runs.map((run) => new Map(run.figures.map((f) => [f.key, f])));
  return keys.map((key) => ({ ...labels.get(key)!, found: byKey.map((figures) => figures.get(key)) }));
}

/**
 * Several runs of the same options on different stores, run one after the other: one row per
 * figure (in the order they first appear), one value column per store, and each store's verdict.
 */
export function renderComparison(runs: BenchResults[]): string {
  const rows = merged(runs).map(({ label, unit, found }) => {
    const verdicts = found.map(verdict);
    const targets = verdicts.some(Boolean)
      ? runs.map((run, i) => `${run.meta.store}: ${verdicts[i] || '–'}`).join('; ')
      : '';
    return [label, ...found.map((f) => (f ? format(f.value) : '–')), unit, targets];
  });
  const first = runs[0]!.meta;
  return [
    `fhir-platform-kit benchmark, ${first.date}`,
    `node ${first.node}, ${first.cpus} CPUs (${first.cpuModel}), ${first.platform}`,
    ...runs.map((run) => storeLine(run.meta)),
    '',
    ...grid(
      ['Figure', ...runs.map((run) => run.meta.store), 'Unit', 'Target'],
      rows,
      (i) => i >= 1 && i <= runs.length,
    ),
  ].join('\n');
}

const cell = (text: string): string => text.replaceAll('|', '\\|');

function markdownTable(header: string[], align: ('l' | 'r')[], rows: string[][]): string[] {
  return [
    `| ${header.map(cell).join(' | ')} |`,
    `| ${align.map((a) => (a === 'r' ? '---:' : '---')).join(' | ')} |`,
    ...rows.map((row) => `| ${row.map(cell).join(' | ')} |`),
  ];
}

/**
 * The run (or one run per store) as Markdown, for docs/performance.md: what ran, then the figures
 * that carry a target with their verdicts, then every figure.
 */
export function renderMarkdown(runs: BenchResults[]): string {
  const values = runs.length === 1 ? ['Value'] : runs.map((run) => run.meta.store);
  const rows = merged(runs);
  const verdicts = (found: Found[]): string =>
    found
      .map((f, i) =>
        f?.target === undefined
          ? ''
          : `${runs.length === 1 ? '' : `${runs[i]!.meta.store}: `}${f.pass ? '**ok**' : '**missed**'}`,
      )
      .filter(Boolean)
      .join('; ');
  const withTarget = rows.filter(({ found }) => found.some((f) => f?.target !== undefined));
  const first = runs[0]!.meta;
  return [
    `\`npm run bench\` on ${first.date}: node ${first.node}, ${first.cpus} CPUs (${first.cpuModel}), ${first.platform}.`,
    ...runs.map((run) => `${storeLine(run.meta)}.`),
    '',
    '#### Targets',
    '',
    ...markdownTable(
      ['Figure', 'Target', ...values, 'Unit', 'Verdict'],
      ['l', 'l', ...values.map(() => 'r' as const), 'l', 'l'],
      withTarget.map(({ label, unit, found }) => [
        label,
        found.find((f) => f?.target !== undefined)!.target!,
        ...found.map((f) => (f ? format(f.value) : '–')),
        unit,
        verdicts(found),
      ]),
    ),
    '',
    '#### Every figure',
    '',
    ...markdownTable(
      ['Figure', ...values, 'Unit'],
      ['l', ...values.map(() => 'r' as const), 'l'],
      rows.map(({ label, unit, found }) => [label, ...found.map((f) => (f ? format(f.value) : '–')), unit]),
    ),
  ].join('\n');
}
