/**
 * Summarises a V8 `.cpuprofile` (from `npm run bench -- --profile` or `compare-ingest.ts --profile`):
 * the functions and the source files with the most self time and, with `--inclusive`, the
 * functions with the most inclusive time (a sample counts once for every function on its stack).
 *
 *   node --import tsx bench/profile-summary.ts FILE… [--top 25] [--last MS] [--inclusive] [--match TEXT]…
 *
 *   --last MS     only the samples of the profile's last MS milliseconds (the timed load, without
 *                 the server's start and warm-up, when the load ends the process)
 *   --inclusive   also list inclusive times
 *   --match TEXT  with --inclusive: only functions whose label holds TEXT (repeatable)
 *
 * Functions are labelled `name file:line:column` (code run through tsx is all on line 1).
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber?: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  endTime?: number;
  startTime?: number;
}

function label(frame: ProfileNode['callFrame']): string {
  const file = frame.url ? path.basename(frame.url.replace(/\?.*$/, '')) : '(native)';
  return `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}:${(frame.columnNumber ?? 0) + 1}`;
}

/** The indexes of the samples taken in the profile's last `lastMs` milliseconds (all without it). */
function sampleWindow(profile: CpuProfile, lastMs: number | undefined): (i: number) => boolean {
  if (lastMs === undefined) return () => true;
  const times: number[] = [];
  let at = profile.startTime ?? 0;
  for (const delta of profile.timeDeltas) times.push((at += delta));
  const from = (profile.endTime ?? at) - lastMs * 1000;
  return (i) => (times[i] ?? 0) >= from;
}

/**
 * Inclusive time (ms) per function: each sample counted once for every distinct function on its
 * stack (recursion counted once), largest first; the window as for `summarise`.
 */
export function inclusive(
  profile: CpuProfile,
  lastMs?: number,
): { totalMs: number; functions: [string, number][] } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const child of n.children ?? []) parent.set(child, n.id);
  const inWindow = sampleWindow(profile, lastMs);
  const totals = new Map<string, number>();
  let totalMs = 0;
  profile.samples.forEach((id, i) => {
    if (!inWindow(i)) return;
    const ms = (profile.timeDeltas[i] ?? 0) / 1000;
    totalMs += ms;
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const node = byId.get(at);
      if (!node) break;
      const name = label(node.callFrame);
      if (seen.has(name)) continue;
      seen.add(name);
      totals.set(name, (totals.get(name) ?? 0) + ms);
    }
  });
  return { totalMs, functions: [...totals].sort((a, b) => b[1] - a[1]) };
}

/** Self time (ms) per function and per file of one profile, largest first (the last `lastMs` ms only, when given). */
export function summarise(
  profile: CpuProfile,
  lastMs?: number,
): {
  totalMs: number;
  functions: [string, number][];
  files: [string, number][];
} {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  const inWindow = sampleWindow(profile, lastMs);
  profile.samples.forEach((id, i) => {
    if (inWindow(i)) self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0) / 1000);
  });
  const functions = new Map<string, number>();
  const files = new Map<string, number>();
  let totalMs = 0;
  for (const [id, ms] of self) {
    const frame = byId.get(id)?.callFrame;
    if (!frame) continue;
    totalMs += ms;
    const file = frame.url ? path.basename(frame.url.replace(/\?.*$/, '')) : '(native)';
    const fn = label(frame);
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
    options: {
      top: { type: 'string', default: '25' },
      last: { type: 'string' },
      inclusive: { type: 'boolean', default: false },
      match: { type: 'string', multiple: true },
    },
  });
  const top = Number(values.top);
  const lastMs = values.last === undefined ? undefined : Number(values.last);
  for (const file of positionals) {
    const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile;
    const { totalMs, functions, files } = summarise(profile, lastMs);
    const pct = (ms: number) => `${((100 * ms) / totalMs).toFixed(1).padStart(5)}%`;
    const window = lastMs === undefined ? '' : ` (the last ${lastMs} ms)`;
    console.log(`\n${file}: ${Math.round(totalMs)} ms sampled${window}`);
    console.log('  self time by file:');
    for (const [name, ms] of files.slice(0, 12)) console.log(`  ${pct(ms)}  ${Math.round(ms)} ms  ${name}`);
    console.log('  self time by function:');
    for (const [name, ms] of functions.slice(0, top))
      console.log(`  ${pct(ms)}  ${Math.round(ms)} ms  ${name}`);
    if (values.inclusive) {
      const wanted = values.match ?? [];
      console.log('  inclusive time by function:');
      const rows = inclusive(profile, lastMs).functions.filter(
        ([name]) => wanted.length === 0 || wanted.some((text) => name.includes(text)),
      );
      for (const [name, ms] of rows.slice(0, top)) console.log(`  ${pct(ms)}  ${Math.round(ms)} ms  ${name}`);
    }
  }
}
