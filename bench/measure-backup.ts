/**
 * `npx tsx bench/measure-backup.ts [--patients N] [--reps R]`: the file store's online backup
 * (`FileStore.backup`, docs/file-store.md "Backups") of N generated patients (about 401 resources
 * each; default 250 ≈ 100k resources, 2500 ≈ 1M), R times, with a copy of the same log files
 * (`fs.copyFile`, each synced) in the same run as the ratio base, and a one-resource write issued
 * right after each backup starts (how long the backup holds the writer) against the same write
 * alone. Prints medians.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileStorage } from '../src/stores.js';
import { generatePatients } from './dataset.js';
import { median, now } from './stats.js';

const { values } = parseArgs({
  options: { patients: { type: 'string', default: '250' }, reps: { type: 'string', default: '3' } },
});
const patients = Number(values.patients);
const reps = Number(values.reps);

/** Every file under `dir` (relative paths). */
function filesUnder(dir: string, rel = ''): string[] {
  return fs.readdirSync(path.join(dir, rel), { withFileTypes: true }).flatMap((e) => {
    const child = path.join(rel, e.name);
    return e.isDirectory() ? filesUnder(dir, child) : [child];
  });
}

/** Copies the store's logs with `fs.copyFile`, each synced: the plain copy a backup is held to. */
async function plainCopy(storeDir: string, target: string): Promise<number> {
  const start = now();
  for (const rel of filesUnder(storeDir).filter((f) => f.endsWith('.log') || f === 'directory.json')) {
    const to = path.join(target, rel);
    await fs.promises.mkdir(path.dirname(to), { recursive: true });
    await fs.promises.copyFile(path.join(storeDir, rel), to);
    const handle = await fs.promises.open(to, 'r+');
    await handle.sync();
    await handle.close();
  }
  return now() - start;
}

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-bench-backup-'));
try {
  const storeDir = path.join(root, 'store');
  const storage = await fileStorage({ dir: storeDir });
  await storage.createProject({ id: 'p1', name: 'Backup benchmark', strictMode: false });
  let batch: { op: 'update'; resource: Record<string, unknown> & { resourceType: string; id: string } }[] =
    [];
  let resources = 0;
  for (const resource of generatePatients(patients)) {
    batch.push({ op: 'update', resource: resource as (typeof batch)[number]['resource'] });
    if (batch.length === 1000) {
      await storage.writeResources('p1', batch);
      resources += batch.length;
      batch = [];
    }
  }
  if (batch.length > 0) await storage.writeResources('p1', batch);
  resources += batch.length;
  const write = async (): Promise<number> => {
    const start = now();
    await storage.createResource('p1', { resourceType: 'Basic', code: { text: 'benchmark' } });
    return now() - start;
  };
  const backupMs: number[] = [];
  const copyMs: number[] = [];
  const heldMs: number[] = [];
  const aloneMs: number[] = [];
  let bytes = 0;
  for (let rep = 0; rep < reps; rep++) {
    aloneMs.push(await write());
    const start = now();
    const pending = storage.backup(path.join(root, `backup-${rep}`));
    heldMs.push(await write());
    bytes = (await pending).bytes;
    backupMs.push(now() - start);
    fs.rmSync(path.join(root, `backup-${rep}`), { recursive: true });
    copyMs.push(await plainCopy(storeDir, path.join(root, `copy-${rep}`)));
    fs.rmSync(path.join(root, `copy-${rep}`), { recursive: true });
  }
  await storage.close();
  const mib = bytes / 1024 / 1024;
  const rows: [string, string][] = [
    ['Resources', resources.toLocaleString('en-US')],
    ['Backup size (logs and directory.json)', `${mib.toFixed(1)} MiB`],
    [
      'Backup, median',
      `${median(backupMs).toFixed(0)} ms (${(mib / (median(backupMs) / 1000)).toFixed(0)} MiB/s)`,
    ],
    ['Plain copy of the same files (copyFile + fsync), median', `${median(copyMs).toFixed(0)} ms`],
    ['Backup / plain copy', `${(median(backupMs) / median(copyMs)).toFixed(2)}x`],
    ['One write issued as the backup starts, median', `${median(heldMs).toFixed(1)} ms`],
    ['The same write alone, median', `${median(aloneMs).toFixed(1)} ms`],
  ];
  console.log(`${new Date().toISOString()}; ${reps} reps; ${patients} patients`);
  for (const [name, value] of rows) console.log(`${name.padEnd(58)} ${value}`);
} finally {
  fs.rmSync(root, { recursive: true, force: true });
}
