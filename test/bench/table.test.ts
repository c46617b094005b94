import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { BenchResults, Figure } from '../../bench/benchmark.js';
import { renderMarkdown } from '../../bench/table.js';
import { tempDir } from '../helpers/temp-dir.js';

function run(store: BenchResults['meta']['store'], figures: Figure[]): BenchResults {
  return {
    meta: {
      date: '2026-11-26T05:45:00.000Z',
      node: 'v20.20.2',
      platform: 'linux x64',
      cpus: 2,
      cpuModel: 'Test CPU',
      totalMemory: 0,
      store,
      durability: 'fsync',
      workerExports: true,
      patients: 250,
      resources: 100_250,
      options: { reps: 3 } as BenchResults['meta']['options'],
      durationMs: 54_000,
    },
    figures,
    samples: {},
  };
}

const EXPORT_RATIO: Figure = {
  key: 'export.system.ratio',
  label: 'System export / streamed copy',
  value: 0.845,
  unit: 'x',
  target: '<= 3 (at 1,000,000 resources)',
  pass: true,
};
const RATE: Figure = {
  key: 'load.storage.rate',
  label: 'Load | storage',
  value: 23_728.4,
  unit: 'resources/s',
};
const GROUP: Figure = {
  key: 'export.group.ratio',
  label: 'Group export / system export',
  value: 0.172,
  unit: 'x',
  target: '<= 0.05',
  pass: false,
};

describe('bench --markdown', () => {
  it('lists the figures with a target and their verdicts, then every figure', () => {
    const text = renderMarkdown([run('file', [RATE, EXPORT_RATIO, GROUP])]);
    const lines = text.split('\n');
    const targets = lines.indexOf('#### Targets');
    const every = lines.indexOf('#### Every figure');
    expect(targets).toBeGreaterThan(0);
    expect(lines.slice(targets + 2, every - 1)).toEqual([
      '| Figure | Target | Value | Unit | Verdict |',
      '| --- | --- | ---: | --- | --- |',
      '| System export / streamed copy | <= 3 (at 1,000,000 resources) | 0.845 | x | **ok** |',
      '| Group export / system export | <= 0.05 | 0.172 | x | **missed** |',
    ]);
    // A `|` in a label is escaped; large values get thousands separators.
    expect(lines.slice(every + 2)).toContain('| Load \\| storage | 23,728 | resources/s |');
  });

  it('puts runs on several stores side by side, each with its verdict', () => {
    const text = renderMarkdown([
      run('file', [EXPORT_RATIO]),
      run('postgres', [{ ...EXPORT_RATIO, value: 3.5, pass: false }]),
    ]);
    expect(text).toContain('| Figure | Target | file | postgres | Unit | Verdict |');
    expect(text).toContain(
      '| System export / streamed copy | <= 3 (at 1,000,000 resources) | 0.845 | 3.5 | x | file: **ok**; postgres: **missed** |',
    );
  });

  it('renders a saved run without measuring (--from), and prints its options (--help)', () => {
    const saved = path.join(tempDir('fpk-bench-table-'), 'results.json');
    fs.writeFileSync(saved, JSON.stringify(run('file', [EXPORT_RATIO])));
    const bench = (...args: string[]) =>
      execFileSync(process.execPath, ['--import', 'tsx', 'bench/run.ts', ...args], { encoding: 'utf8' });
    expect(bench('--from', saved, '--markdown')).toContain(
      '| System export / streamed copy | <= 3 (at 1,000,000 resources) | 0.845 | x | **ok** |',
    );
    expect(bench('--help')).toMatch(/--markdown[\s\S]*--from FILE/);
  });
});
