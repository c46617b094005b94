/**
 * Summarises a V8 `.cpuprofile` (from `npm run bench -- --profile`): the functions and the source
 * files with the most self time.
 *
 *   node --import tsx bench/profile-summary.ts bench/out/profiles/CPU.*.cpuprofile [--top 25]
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** Self time (ms) per function and per file of one profile, largest first. */
export function summarise(profile: CpuProfile): {
  totalMs: number;
  functions: [string, number][];
  files: [string, number][];
} {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000));
  const functions = new Map<string, number>();
  const files = new Map<string, number>();
  let totalMs = 0;
  for (const [id, ms] of self) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) continue;
    totalMs += ms;
    const file = frame.url ? path.basename(frame.url.replace(/\?.*$/, '')) : '(native)';
    const fn = `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}`;
    functions.set(fn, (functions.get(fn) ?? 0) + ms);
    files.set(file, (files.get(file) ?? 0) + ms);
  }
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]);
  return { totalMs, functions: sorted(functions), files: sorted(files) };
}

if (
  process.argv[1] &&
  path.resolve(process.argv[1]).startsWith(path.resolve(import.meta.dirname, 'profile-summary'))
) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { top: { type: 'string', default: '25' } },
  });
  const top = Number(values.top);
  for (const file of positionals) {
    const { totalMs, functions, files } = summarise(JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile);
    const pct = (ms: number) => `${((100 * ms) / totalMs).toFixed(1).padStart(5)}%`;
    console.log(`\n${file}: ${Math.round(totalMs)} ms sampled`);
    console.log('  self time by file:');
    for (const [name, ms] of files.slice(0, 12)) console.log(`  ${pct(ms)}  ${Math.round(ms)} ms  ${name}`);
    console.log('  self time by function:');
    for (const [name, ms] of functions.slice(0, top))
      console.log(`  ${pct(ms)}  ${Math.round(ms)} ms  ${name}`);
  }
}
