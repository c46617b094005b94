import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StorageError } from '../../src/storage/errors.js';
import { decodeIndexFile, encodeIndexFile } from '../../src/storage/file/log-index.js';
import type { Storage } from '../../src/storage/types.js';
import { collectNdjson } from '../../src/testing/storage-contract.js';
import {
  expectUnavailable,
  FaultPlan,
  openFaultyStore,
  patient,
  resourceLog,
} from '../helpers/file-faults.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * Disk faults injected into the file store's own file operations (its internal `FaultHook`), and
 * damaged files at open. Each fault: the call gets `StorageUnavailableError` (503 over HTTP, see
 * file-faults-http.test.ts), every acknowledged write stays readable, after the fault clears and
 * after a reopen, the failed ones are wholly absent, and the store goes on without a restart.
 * The stale lock of a dead process is covered by file.test.ts ("takes over a stale lock", "a zombie").
 */

const open: Storage[] = [];
afterEach(async () => {
  for (const storage of open.splice(0)) await storage.close().catch(() => undefined);
});

async function openStore(
  dir: string,
  plan?: FaultPlan,
  options: { compactionMinDeadBytes?: number; durability?: 'fsync' | 'write' } = {},
) {
  const storage = await openFaultyStore(dir, plan, options);
  open.push(storage);
  return storage;
}

async function reopen(storage: Storage, dir: string): Promise<Storage> {
  await storage.close();
  return openStore(dir);
}

/** Every file under `dir` whose name matches `pattern` (temp files, snapshot links). */
function filesMatching(dir: string, pattern: RegExp): string[] {
  return (fs.readdirSync(dir, { recursive: true }) as string[]).filter((name) => pattern.test(name));
}

/** The ids and families of the project's Patients, sorted by id. */
async function patients(storage: Storage): Promise<string[]> {
  const page = await storage.searchResources('p1', 'Patient', { sort: '_id' });
  return page.resources.map((r) => `${r.id}:${(r.name as { family: string }[])[0]!.family}`);
}

async function notFound(storage: Storage, type: string, id: string): Promise<void> {
  await expect(storage.readResource('p1', type, id)).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });
}

describe('a commit hit by a disk fault', () => {
  it('ENOSPC half-way through a log append: the torn tail is cut, the next write succeeds, nothing lost', async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    let storage = await openStore(dir, plan);
    await storage.createResource('p1', patient('a'));
    const log = resourceLog(dir, 'Patient');
    const size = fs.statSync(log).size;
    plan.fail({ op: 'write', file: log, code: 'ENOSPC', tear: true, times: 1 });
    await expectUnavailable(storage.createResource('p1', patient('b')), 'ENOSPC');
    expect(plan.injected).toHaveLength(1);
    expect(fs.statSync(log).size).toBe(size);
    await notFound(storage, 'Patient', 'b');
    await storage.createResource('p1', patient('c'));
    expect(await patients(storage)).toEqual(['a:a', 'c:c']);
    storage = await reopen(storage, dir);
    expect(await patients(storage)).toEqual(['a:a', 'c:c']);
  });

  it.each([
    { name: 'ENOSPC writing the batch.log entry', op: 'write', file: /batch\.log$/, code: 'ENOSPC' },
    { name: 'EIO on the fsync of the batch.log entry', op: 'fsync', file: /batch\.log$/, code: 'EIO' },
    { name: 'ENOSPC appending to the log', op: 'write', file: /Patient\.log$/, code: 'ENOSPC' },
  ] as const)(
    '$name: the update is not kept, the previous version stays current',
    async ({ op, file, code }) => {
      const dir = tempDir('fpk-faults-');
      const plan = new FaultPlan();
      let storage = await openStore(dir, plan);
      await storage.createResource('p1', patient('a', 'v1'));
      const batchLog = path.join(dir, 'batch.log');
      const batchSize = fs.statSync(batchLog).size;
      plan.fail({ op, file, code });
      await expectUnavailable(storage.updateResource('p1', patient('a', 'v2')), code);
      await expectUnavailable(storage.createResource('p1', patient('b')), code);
      // The entry of a failed batch (its commit, when it reached the file) is cut first.
      expect(fs.statSync(batchLog).size).toBe(batchSize);
      expect(await patients(storage)).toEqual(['a:v1']);
      plan.clear();
      const { resource } = await storage.updateResource('p1', patient('a', 'v3'));
      expect(resource.meta.versionId).toBe('2');
      storage = await reopen(storage, dir);
      expect(await patients(storage)).toEqual(['a:v3']);
      expect((await storage.readResource('p1', 'Patient', 'a')).meta.versionId).toBe('2');
    },
  );

  it('concurrent writes: each is either acknowledged and kept, or refused and absent', async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    let storage = await openStore(dir, plan);
    await storage.createResource('p1', { resourceType: 'Observation', id: 'o0' });
    plan.fail({ op: 'write', file: /Observation\.log$/, code: 'ENOSPC', tear: true, times: 1 });
    const writes = [
      ...['a', 'b', 'c'].map((id) => storage.createResource('p1', patient(id))),
      storage.createResource('p1', { resourceType: 'Observation', id: 'o1' }),
      storage.writeResources('p1', [
        { op: 'create', resource: patient('d') },
        { op: 'create', resource: { resourceType: 'Observation', id: 'o2' } },
      ]),
    ];
    const outcomes = await Promise.allSettled(writes);
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(refused.length).toBeGreaterThan(0);
    for (const o of refused) expect((o.reason as StorageError).code).toBe('ERR_STORAGE_UNAVAILABLE');
    const expected = (ids: string[], i: number) => (outcomes[i]!.status === 'fulfilled' ? ids : []);
    const kept = {
      Patient: [...expected(['a'], 0), ...expected(['b'], 1), ...expected(['c'], 2), ...expected(['d'], 4)],
      Observation: ['o0', ...expected(['o1'], 3), ...expected(['o2'], 4)],
    };
    const ids = async (s: Storage, type: string) =>
      (await s.searchResources('p1', type, { sort: '_id' })).resources.map((r) => r.id);
    expect({
      Patient: await ids(storage, 'Patient'),
      Observation: await ids(storage, 'Observation'),
    }).toEqual(kept);
    await storage.createResource('p1', { resourceType: 'Observation', id: 'o3' });
    kept.Observation.push('o3');
    storage = await reopen(storage, dir);
    expect({
      Patient: await ids(storage, 'Patient'),
      Observation: await ids(storage, 'Observation'),
    }).toEqual(kept);
  });

  it('ENOSPC writing directory.json: the old file stays, no temp file is left, the next write succeeds', async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    let storage = await openStore(dir, plan);
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    plan.fail({ op: 'write', file: /directory\.json\.tmp$/, code: 'ENOSPC', tear: true });
    await expectUnavailable(storage.createProject({ id: 'p2', name: 'Two', strictMode: false }), 'ENOSPC');
    // A user of a project seen for the first time gives it a directory: a directory.json change too.
    await expectUnavailable(storage.createUser('p3', user('u3')), 'ENOSPC');
    expect(filesMatching(dir, /\.tmp$/)).toEqual([]);
    expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p1']);
    plan.clear();
    await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
    await storage.createUser('p3', user('u3'));
    storage = await reopen(storage, dir);
    expect((await storage.listProjects()).map((p) => p.id).sort()).toEqual(['p1', 'p2']);
    expect((await storage.listUsers('p3')).map((u) => u.userName)).toEqual(['u3']);
  });

  it('directory.json renamed but its directory fsync fails: put back, retried before each write until the disk answers', async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    let storage = await openStore(dir, plan);
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    await storage.createResource('p1', patient('a'));
    plan.fail({ op: 'fsync', file: dir, code: 'EIO' });
    await expectUnavailable(storage.createProject({ id: 'p2', name: 'Two', strictMode: false }), 'EIO');
    // The old content is back in place (not yet known durable, so every write retries first).
    const onDisk = JSON.parse(fs.readFileSync(path.join(dir, 'directory.json'), 'utf8')) as {
      projects: Record<string, unknown>;
    };
    expect(Object.keys(onDisk.projects)).toEqual(['p1']);
    await expectUnavailable(storage.createResource('p1', patient('b')), 'EIO');
    // Reads go on meanwhile.
    expect(await patients(storage)).toEqual(['a:a']);
    expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p1']);
    plan.clear();
    await storage.createResource('p1', patient('c'));
    storage = await reopen(storage, dir);
    expect((await storage.listProjects()).map((p) => p.id)).toEqual(['p1']);
    expect(await patients(storage)).toEqual(['a:a', 'c:c']);
  });

  it('the undo fails too (EIO truncating): retried before the next write; a store closed meanwhile reopens consistent', async () => {
    for (const end of ['clear', 'close'] as const) {
      const dir = tempDir('fpk-faults-');
      const plan = new FaultPlan();
      let storage = await openStore(dir, plan);
      await storage.createResource('p1', patient('a'));
      const log = resourceLog(dir, 'Patient');
      const size = fs.statSync(log).size;
      plan.fail({ op: 'write', file: log, code: 'ENOSPC', tear: true, times: 1 });
      plan.fail({ op: 'truncate', file: log, code: 'EIO' });
      await expectUnavailable(storage.createResource('p1', patient('b')), 'ENOSPC');
      // Still torn, and every write waits for the undo.
      expect(fs.statSync(log).size).toBeGreaterThan(size);
      await expectUnavailable(storage.createResource('p1', { resourceType: 'Observation', id: 'o1' }), 'EIO');
      if (end === 'clear') {
        plan.clear();
        await storage.createResource('p1', patient('c'));
        expect(await patients(storage)).toEqual(['a:a', 'c:c']);
      }
      storage = await reopen(storage, dir);
      expect(await patients(storage)).toEqual(end === 'clear' ? ['a:a', 'c:c'] : ['a:a']);
      await notFound(storage, 'Observation', 'o1');
      await storage.createResource('p1', patient('d'));
      expect((await patients(storage)).at(-1)).toBe('d:d');
    }
  });

  it("ENOSPC creating a project's first log: nothing of the batch stays, not even its directory name", async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    let storage = await openStore(dir, plan);
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    plan.fail({ op: ['mkdir', 'open'], file: /resources/, code: 'ENOSPC' });
    await expectUnavailable(storage.createResource('p1', patient('a')), 'ENOSPC');
    plan.clear();
    // A later directory.json write must not carry the failed batch's project directory.
    await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
    const onDisk = JSON.parse(fs.readFileSync(path.join(dir, 'directory.json'), 'utf8')) as {
      projectDirs: Record<string, string>;
    };
    expect(onDisk.projectDirs).toEqual({});
    await storage.createResource('p1', patient('a'));
    storage = await reopen(storage, dir);
    expect(await patients(storage)).toEqual(['a:a']);
  });
});

const user = (userName: string) => ({
  projectId: 'p3',
  userName,
  userType: 'Patient' as const,
  profileId: `pat-${userName}`,
  active: true,
  data: {},
});

describe('compaction hit by a disk fault', () => {
  /**
   * Versions v_from…v_to of Patient a: from v3 on, each update leaves the log mostly dead, so it is
   * compacted after the batch. Returns once that compaction has run (a snapshot waits for the
   * writer, and compaction runs in the writer after acknowledging the batch).
   */
  async function updates(storage: Storage, from: number, to: number): Promise<void> {
    for (let v = from; v <= to; v++) await storage.updateResource('p1', patient('a', `v${v}`));
    await storage.releaseSnapshot(await storage.exportSnapshot('p1'));
  }
  const recordsIn = (file: string) => fs.readFileSync(file, 'utf8').split('\n').length - 1;

  it.each([
    { name: 'ENOSPC writing the new file', op: 'write', file: /\.compact$/, code: 'ENOSPC' },
    { name: 'EIO syncing the new file', op: 'fsync', file: /\.compact$/, code: 'EIO' },
    { name: 'EIO renaming it into place', op: 'rename', file: /Patient\.log$/, code: 'EIO' },
  ] as const)(
    '$name: writes go on, no temp file is left, the log is compacted once the fault clears',
    async ({ op, file, code }) => {
      const dir = tempDir('fpk-faults-');
      const plan = new FaultPlan();
      let storage = await openStore(dir, plan, { compactionMinDeadBytes: 0 });
      await storage.createResource('p1', patient('a', 'v1'));
      const log = resourceLog(dir, 'Patient');
      plan.fail({ op, file, code, tear: op === 'write' });
      await updates(storage, 2, 6);
      expect(plan.injected.length).toBeGreaterThan(0);
      expect(recordsIn(log)).toBe(6);
      expect(filesMatching(dir, /\.compact$/)).toEqual([]);
      expect(await patients(storage)).toEqual(['a:v6']);
      plan.clear();
      await updates(storage, 7, 7);
      expect(recordsIn(log)).toBe(1);
      storage = await reopen(storage, dir);
      expect(await patients(storage)).toEqual(['a:v7']);
      expect((await storage.readResource('p1', 'Patient', 'a')).meta.versionId).toBe('7');
    },
  );

  it('the directory fsync after the rename fails: the new file is used, and the next commit to it syncs the directory first', async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    let storage = await openStore(dir, plan, { compactionMinDeadBytes: 0 });
    await storage.createResource('p1', patient('a', 'v1'));
    const log = resourceLog(dir, 'Patient');
    await updates(storage, 2, 2);
    plan.fail({ op: 'fsync', file: path.dirname(log), code: 'EIO' });
    // Acknowledged, then compacted into a new file whose rename is not known durable.
    await updates(storage, 3, 3);
    expect(recordsIn(log)).toBe(1);
    // A commit to that file needs the rename durable first: refused while the directory cannot sync.
    await expectUnavailable(storage.updateResource('p1', patient('a', 'v4')), 'EIO');
    expect(await patients(storage)).toEqual(['a:v3']);
    plan.clear();
    await updates(storage, 4, 4);
    storage = await reopen(storage, dir);
    expect(await patients(storage)).toEqual(['a:v4']);
  });
});

describe('an export snapshot hit by a disk fault', () => {
  it('ENOSPC linking or copying the logs: refused, nothing left in snapshots/, the next one works', async () => {
    const dir = tempDir('fpk-faults-');
    const plan = new FaultPlan();
    const storage = await openStore(dir, plan);
    await storage.createResource('p1', patient('a'));
    await storage.createResource('p1', { resourceType: 'Observation', id: 'o1' });
    plan.fail({ op: ['link', 'write'], file: /snapshots/, code: 'ENOSPC' });
    await expectUnavailable(storage.exportSnapshot('p1', { patientIds: ['a'] }), 'ENOSPC');
    expect(fs.readdirSync(path.join(dir, 'snapshots'))).toEqual([]);
    plan.clear();
    const snapshot = await storage.exportSnapshot('p1', { patientIds: ['a'] });
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' }),
    );
    expect(rows.map((r) => r.id)).toEqual(['a']);
    await storage.releaseSnapshot(snapshot);
  });
});

describe('opening a directory that cannot be written', () => {
  it.each([
    { name: 'EROFS creating it', op: 'mkdir', file: /projects$/, code: 'EROFS' },
    { name: 'EACCES writing the lock', op: 'write', file: /\.lock-/, code: 'EACCES' },
    { name: 'EROFS linking the lock', op: 'link', file: /lock$/, code: 'EROFS' },
    { name: 'EROFS rewriting commit.log', op: 'rename', file: /commit\.log$/, code: 'EROFS' },
  ] as const)(
    '$name: rejects with StorageUnavailableError naming the directory, leaves no lock',
    async ({ op, file, code }) => {
      const dir = tempDir('fpk-faults-');
      const plan = new FaultPlan().fail({ op, file, code });
      const error = await expectUnavailable(openStore(dir, plan), code);
      expect(error.message).toContain(dir);
      expect(error.message).toContain(code);
      expect(filesMatching(dir, /lock/)).toEqual([]);
      plan.clear();
      const storage = await openStore(dir, plan);
      await storage.createResource('p1', patient('a'));
    },
  );

  it('a path through a regular file (ENOTDIR): the same typed error, at once', async () => {
    const dir = tempDir('fpk-faults-');
    fs.writeFileSync(path.join(dir, 'file'), '');
    await expectUnavailable(openStore(path.join(dir, 'file', 'store')), 'ENOTDIR');
  });
});

describe('damaged files at open', () => {
  /** A store with Patients a, b, c (one commit each), closed cleanly; the Patient log and the offset of b. */
  async function threePatients(dir: string, options: { durability?: 'write' } = {}) {
    const storage = await openStore(dir, undefined, options);
    for (const id of ['a', 'b', 'c']) await storage.createResource('p1', patient(id));
    await storage.close();
    const log = resourceLog(dir, 'Patient');
    const lines = fs.readFileSync(log, 'utf8').split('\n');
    return { log, offsetOfB: Buffer.byteLength(lines[0]!) + 1, size: fs.statSync(log).size };
  }

  it('a record damaged before committed ones: refused, naming the file and the offset; cut there, the store opens', async () => {
    const dir = tempDir('fpk-faults-');
    const { log, offsetOfB } = await threePatients(dir);
    const bytes = fs.readFileSync(log);
    bytes[offsetOfB + 70]! ^= 0x01; // a byte of b's JSON
    fs.writeFileSync(log, bytes);
    // With the index of the clean close, the open does not read b: reading it detects the damage.
    let storage = await openStore(dir);
    expect(await storage.readResource('p1', 'Patient', 'a')).toMatchObject({ id: 'a' });
    expect(await storage.readResource('p1', 'Patient', 'c')).toMatchObject({ id: 'c' });
    await expect(storage.readResource('p1', 'Patient', 'b')).rejects.toMatchObject({
      code: 'ERR_STORAGE_CORRUPT',
      message: expect.stringContaining(log) as string,
    });
    // Without an index (as after a crash) the open scans b and refuses, every time (no lock left).
    await storage.close();
    fs.rmSync(`${log}.idx`, { force: true });
    for (let attempt = 0; attempt < 2; attempt++) {
      const error = (await openStore(dir).catch((e: unknown) => e)) as StorageError;
      expect(error).toBeInstanceOf(StorageError);
      expect(error.code).toBe('ERR_STORAGE_CORRUPT');
      expect(error.message).toContain(log);
      expect(error.message).toContain(`byte ${offsetOfB}`);
    }
    // Doing what the message says opens the store with what precedes the damage.
    fs.truncateSync(log, offsetOfB);
    storage = await openStore(dir);
    expect(await patients(storage)).toEqual(['a:a']);
    await storage.createResource('p1', patient('d'));
    storage = await reopen(storage, dir);
    expect(await patients(storage)).toEqual(['a:a', 'd:d']);
  });

  it('a log cut short below what its index covers: refused, naming it; without the index, the cut tail is repaired', async () => {
    const dir = tempDir('fpk-faults-');
    const { log, size } = await threePatients(dir);
    fs.truncateSync(log, size - 10);
    const error = (await openStore(dir).catch((e: unknown) => e)) as StorageError;
    expect(error.code).toBe('ERR_STORAGE_CORRUPT');
    expect(error.message).toContain(log);
    fs.rmSync(`${log}.idx`);
    const storage = await openStore(dir);
    expect(await patients(storage)).toEqual(['a:a', 'b:b']);
  });

  it('a damaged index file (valid JSON, one offset changed; or cut short) is ignored: the log is scanned', async () => {
    for (const damage of ['offset', 'cut'] as const) {
      const dir = tempDir('fpk-faults-');
      const { log } = await threePatients(dir);
      const text = fs.readFileSync(`${log}.idx`, 'utf8');
      const index = decodeIndexFile(text)!;
      expect(index.entries.map((e) => e[0])).toEqual(['a', 'b', 'c']);
      // Without the checksum, this index would point b at c's record.
      const pointed = encodeIndexFile({
        ...index,
        entries: index.entries.map((e) =>
          e[0] === 'b' ? [...e.slice(0, 4), index.entries[2]![4], ...e.slice(5)] : e,
        ) as typeof index.entries,
      });
      const damaged =
        damage === 'offset' ? `${text.slice(0, 9)}${pointed.slice(9)}` : text.slice(0, text.length / 2);
      fs.writeFileSync(`${log}.idx`, damaged);
      const storage = await openStore(dir);
      expect(await patients(storage)).toEqual(['a:a', 'b:b', 'c:c']);
      expect(await storage.readResource('p1', 'Patient', 'b')).toMatchObject({ id: 'b' });
    }
  });

  it('a damaged commit.log record before intact ones: the batches they commit are kept', async () => {
    const dir = tempDir('fpk-faults-');
    // With durability 'write' each batch commits with a commit.log record ('fsync' goes through
    // batch.log, see batch-log.test.ts).
    await threePatients(dir, { durability: 'write' });
    // As after a crash: no index, so every record is checked against the last committed batch.
    const log = resourceLog(dir, 'Patient');
    fs.rmSync(`${log}.idx`);
    const commitLog = path.join(dir, 'commit.log');
    // The records of the batches of b and c, after the one rewritten at open.
    const records = fs.readFileSync(commitLog, 'latin1');
    expect(records.length).toBe(3 * 22);
    fs.writeFileSync(commitLog, `${records.slice(0, 22)}${'x'.repeat(21)}\n${records.slice(44)}`, 'latin1');
    const storage = await openStore(dir);
    expect(await patients(storage)).toEqual(['a:a', 'b:b', 'c:c']);
  });

  it('a damaged directory.json: refused, naming it (nothing else holds projects, clients and keys)', async () => {
    const dir = tempDir('fpk-faults-');
    const storage = await openStore(dir);
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    await storage.close();
    const file = path.join(dir, 'directory.json');
    fs.writeFileSync(file, fs.readFileSync(file, 'utf8').slice(0, -5));
    const error = (await openStore(dir).catch((e: unknown) => e)) as StorageError;
    expect(error.code).toBe('ERR_STORAGE_CORRUPT');
    expect(error.message).toContain(file);
    expect(filesMatching(dir, /lock/)).toEqual([]);
  });

  it("directory.json deleted: refused, and the projects' logs are kept", async () => {
    const dir = tempDir('fpk-faults-');
    const storage = await openStore(dir);
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await storage.close();
    const logs = filesMatching(dir, /\.log$/);
    fs.rmSync(path.join(dir, 'directory.json'));
    const error = (await openStore(dir).catch((e: unknown) => e)) as StorageError;
    expect(error.code).toBe('ERR_STORAGE_CORRUPT');
    expect(error.message).toContain('directory.json');
    expect(filesMatching(dir, /\.log$/)).toEqual(logs);
  });
});
