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

/**
 * Several runs of the same options on different stores, run one after the other: one row per
 * figure (in the order they first appear), one value column per store, and each store's verdict.
 */
export function renderComparison(runs: BenchResults[]): string {
  const keys: string[] = [];
  const labels = new Map<string, { label: string; unit: string }>();
  for (const run of runs) {
    for (const f of run.figures) {
      if (!labels.has(f.key)) keys.push(f.key);
      labels.set(f.key, { label: f.label, unit: f.unit });
    }
  }
  const byKey = runs.map((run) => new Map(run.figures.map((f) => [f.key, f])));
  const rows = keys.map((key) => {
    const { label, unit } = labels.get(key)!;
    const found = byKey.map((figures) => figures.get(key));
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
