import type { BenchResults } from './benchmark.js';

function format(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  return Math.abs(value) >= 1000 ? Math.round(value).toLocaleString('en-US') : String(value);
}

/** The figures as one plain-text table, with the run's machine and options above it. */
export function renderTable(results: BenchResults): string {
  const { meta } = results;
  const rows = results.figures.map((f) => [
    f.label,
    format(f.value),
    f.unit,
    f.target ? `${f.target} ${f.pass ? 'ok' : 'MISSED'}` : '',
  ]);
  const header = ['Figure', 'Value', 'Unit', 'Target'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === 1 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [
    `fhir-platform-kit benchmark, ${meta.date}`,
    `node ${meta.node}, ${meta.cpus} CPUs (${meta.cpuModel}), ${meta.platform}`,
    `store: ${meta.store}${meta.store === 'file' ? ` (durability ${meta.durability})` : ''}${meta.workerExports ? ' (exports in worker threads)' : ' (exports in the main thread)'}; N = ${meta.patients} patients; ${meta.options.reps} reps (medians); took ${Math.round(meta.durationMs / 1000)} s`,
    '',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
  ].join('\n');
}
