import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import { createFileStorage } from '../../src/storage/file/file-storage.js';
import type { Storage } from '../../src/storage/types.js';
import { FaultPlan, patient, resourceLog } from '../helpers/file-faults.js';
import { tempDir } from '../helpers/temp-dir.js';
import { PATIENCE_MS } from '../helpers/eventually.js';

/**
 * `batch.log`, the file store's write-ahead log with `durability: 'fsync'` (docs/file-store.md,
 * "Writes: group commit"). A `kill -9` keeps what the logs were given (the page cache outlives the
 * process; kill.test.ts covers it), so the cases here build what a power loss can leave instead: a
 * copy of the store's files taken while it is open (as a crash finds them), with the logs' own
 * appends cut back as if their pages never reached the disk.
 */

const open: Storage[] = [];
afterEach(async () => {
  for (const storage of open.splice(0)) await storage.close().catch(() => undefined);
});

async function openStore(
  dir: string,
  options: { durability?: 'fsync' | 'write'; compactionMinDeadBytes?: number } = {},
  internal: { faults?: FaultPlan['hook']; checkpointBytes?: number } = {},
): Promise<Storage> {
  // Compaction (min bytes given) under `{ versions: 1 }`, which drops every old version.
  const history = options.compactionMinDeadBytes !== undefined ? { history: { versions: 1 } } : {};
  const storage = await createFileStorage(
    { dir, ...history, ...options, compartment: R4_PATIENT_COMPARTMENT },
    undefined,
    internal,
  );
  open.push(storage);
  return storage;
}

/** The store's files as a crash that stopped it now would leave them (its lock dropped). */
function crashCopy(dir: string): string {
  const copy = tempDir('fpk-batch-log-crash-');
  fs.cpSync(dir, copy, { recursive: true });
  fs.rmSync(path.join(copy, 'lock'), { force: true });
  return copy;
}

const size = (file: string): number => fs.statSync(file).size;

/** `id:family@version` of the project's Patients, sorted by id. */
async function patients(storage: Storage): Promise<string[]> {
  const page = await storage.searchResources('p1', 'Patient', { sort: '_id' });
  return page.resources.map(
    (r) => `${r.id}:${(r.name as { family: string }[])[0]!.family}@${r.meta.versionId}`,
  );
}

describe('batch.log', () => {
  it.each(['fsync', 'write'] as const)(
    'a crash kept the entries but lost the appends to the logs: the open (durability %s) writes them back',
    async (durability) => {
      const dir = tempDir('fpk-batch-log-');
      const storage = await openStore(dir);
      // The project's first write names its directory: it commits through directory.json.
      await storage.createResource('p1', patient('a', 'v1'));
      const patientLog = resourceLog(dir, 'Patient');
      const afterFirst = size(patientLog);
      await storage.writeResources('p1', [
        { op: 'create', resource: patient('b') },
        { op: 'create', resource: { resourceType: 'Observation', id: 'o1', status: 'final' } },
      ]);
      await storage.updateResource('p1', patient('a', 'v2'));
      await storage.deleteResource('p1', 'Patient', 'b');
      expect(size(path.join(dir, 'batch.log'))).toBeGreaterThan(0);

      const copy = crashCopy(dir);
      fs.truncateSync(resourceLog(copy, 'Patient'), afterFirst);
      fs.truncateSync(resourceLog(copy, 'Observation'), 0);
      const reopened = await openStore(copy, { durability });
      expect(await patients(reopened)).toEqual(['a:v2@2']);
      await expect(reopened.readResource('p1', 'Patient', 'b')).rejects.toMatchObject({
        code: 'ERR_STORAGE_NOT_FOUND',
        deleted: true,
      });
      expect(await reopened.readResource('p1', 'Observation', 'o1')).toMatchObject({ status: 'final' });
      // Written back and synced: the entries are done with.
      expect(size(path.join(copy, 'batch.log'))).toBe(0);
      expect(size(resourceLog(copy, 'Patient'))).toBe(size(patientLog));
      // And the store goes on from there.
      await reopened.updateResource('p1', patient('a', 'v3'));
      expect(await patients(reopened)).toEqual(['a:v3@3']);
    },
  );

  it('an entry torn by the crash: its batch is absent (records it reached the logs with are cut), the ones before are kept', async () => {
    const dir = tempDir('fpk-batch-log-');
    const storage = await openStore(dir);
    for (const id of ['a', 'b', 'c']) await storage.createResource('p1', patient(id));
    const copy = crashCopy(dir);
    const batchLog = path.join(copy, 'batch.log');
    fs.truncateSync(batchLog, size(batchLog) - 7);
    const reopened = await openStore(copy);
    expect(await patients(reopened)).toEqual(['a:a@1', 'b:b@1']);
    expect(size(batchLog)).toBe(0);
    await reopened.createResource('p1', patient('d'));
    await reopened.close();
    expect(await patients(await openStore(copy))).toEqual(['a:a@1', 'b:b@1', 'd:d@1']);
  });

  it('past checkpointBytes the logs are synced, the seq goes to commit.log and batch.log is emptied; a failed checkpoint keeps it for the next', async () => {
    const dir = tempDir('fpk-batch-log-');
    const plan = new FaultPlan();
    const storage = await openStore(dir, {}, { faults: plan.hook, checkpointBytes: 1 });
    await storage.createResource('p1', patient('a'));
    await storage.createResource('p1', patient('b'));
    const batchLog = path.join(dir, 'batch.log');
    const commitLog = path.join(dir, 'commit.log');
    // The writer checkpoints after acknowledging a batch, before the next one.
    await vi.waitFor(() => expect(size(batchLog)).toBe(0), { timeout: PATIENCE_MS });
    const commitRecords = size(commitLog);

    // The log's fsync fails at the checkpoint: the write is acknowledged all the same (batch.log
    // holds it), and batch.log keeps its entry.
    plan.fail({ op: 'fsync', file: /Patient\.log$/, code: 'EIO' });
    await storage.createResource('p1', patient('c'));
    await vi.waitFor(() => expect(plan.injected.length).toBeGreaterThan(0), { timeout: PATIENCE_MS });
    expect(size(batchLog)).toBeGreaterThan(0);
    expect(size(commitLog)).toBe(commitRecords);
    const copy = crashCopy(dir);
    fs.truncateSync(resourceLog(copy, 'Patient'), size(resourceLog(copy, 'Patient')) - 10);
    expect(await patients(await openStore(copy))).toEqual(['a:a@1', 'b:b@1', 'c:c@1']);

    plan.clear();
    await storage.createResource('p1', patient('d'));
    await vi.waitFor(() => expect(size(batchLog)).toBe(0), { timeout: PATIENCE_MS });
    expect(size(commitLog)).toBe(commitRecords + 22);
    await storage.close();
    expect(await patients(await openStore(dir))).toEqual(['a:a@1', 'b:b@1', 'c:c@1', 'd:d@1']);
  });

  it('a compaction checkpoints first: later entries name offsets in the rewritten log', async () => {
    const dir = tempDir('fpk-batch-log-');
    const storage = await openStore(dir, { compactionMinDeadBytes: 0 });
    await storage.createResource('p1', patient('a', 'v1'));
    await storage.createResource('p1', patient('b'));
    const patientLog = resourceLog(dir, 'Patient');
    const records = () => fs.readFileSync(patientLog, 'utf8').split('\n').length - 1;
    // Updates until most of the log is dead: the housekeeping after that batch rewrites it, after a
    // checkpoint. (The writer takes a snapshot between batches: once it has, the housekeeping is done.)
    let version = 1;
    do {
      await storage.updateResource('p1', patient('a', `v${++version}`));
      await storage.releaseSnapshot(await storage.exportSnapshot('p1'));
    } while (records() === version + 1);
    expect(records()).toBe(2);
    expect(size(path.join(dir, 'batch.log'))).toBe(0);
    const compacted = size(patientLog);
    await storage.createResource('p1', patient('c'));
    const copy = crashCopy(dir);
    fs.truncateSync(resourceLog(copy, 'Patient'), compacted);
    expect(await patients(await openStore(copy))).toEqual([`a:v${version}@${version}`, 'b:b@1', 'c:c@1']);
  });

  it('entries of a project deleted since are skipped: its directory does not come back', async () => {
    const dir = tempDir('fpk-batch-log-');
    const storage = await openStore(dir);
    await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
    await storage.createResource('p2', patient('x'));
    await storage.createResource('p2', patient('y'));
    await storage.createResource('p1', patient('a'));
    await storage.createResource('p1', patient('b'));
    const projectDirs = fs.readdirSync(path.join(dir, 'projects'));
    expect(projectDirs).toHaveLength(2);
    await storage.deleteProject('p2');
    expect(size(path.join(dir, 'batch.log'))).toBeGreaterThan(0);
    const copy = crashCopy(dir);
    const reopened = await openStore(copy);
    expect(await patients(reopened)).toEqual(['a:a@1', 'b:b@1']);
    expect(fs.readdirSync(path.join(copy, 'projects'))).toHaveLength(1);
    await expect(reopened.readProject('p2')).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });
  });
});
