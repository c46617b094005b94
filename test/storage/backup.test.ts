import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { R4_PATIENT_COMPARTMENT } from '../../src/fhir/compartment.js';
import { parseSearch } from '../../src/fhir/search/search-query.js';
import type { FaultHook } from '../../src/storage/file/faults.js';
import { createFileStorage, type FileStore } from '../../src/storage/file/file-storage.js';
import { fileStorage } from '../../src/stores.js';
import { newUser } from '../../src/testing/contract-helpers.js';
import { expectUnavailable, FaultPlan, openFaultyStore, patient } from '../helpers/file-faults.js';
import { createApp } from '../helpers/bulk-export.js';
import { tempDir } from '../helpers/temp-dir.js';
import { allReads } from '../helpers/search-reads.js';
import { eventually } from '../helpers/eventually.js';

/** Every Patient of `p1` as `id:family@version`, sorted. */
async function patients(storage: FileStore, projectId = 'p1'): Promise<string[]> {
  const page = await storage.searchResources(projectId, 'Patient', { count: 10_000 });
  return page.resources
    .map((r) => `${r.id}:${(r as { name?: { family?: string }[] }).name?.[0]?.family}@${r.meta.versionId}`)
    .sort();
}

async function newStore(dir = tempDir('fpk-backup-'), compactionMinDeadBytes?: number): Promise<FileStore> {
  const storage = await fileStorage({
    dir,
    ...(compactionMinDeadBytes !== undefined ? { compactionMinDeadBytes, history: { versions: 1 } } : {}),
  });
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
  return storage;
}

describe('fileStorage backup', () => {
  it('copies the store as it was: every record kind, none of the writes after it; both go on', async () => {
    const storage = await newStore();
    await storage.createResource('p1', patient('a', 'v1'));
    await storage.updateResource('p1', patient('a', 'v2'));
    await storage.createResource('p1', patient('b'));
    await storage.deleteResource('p1', 'Patient', 'b');
    await storage.writeResources('p2', [
      { op: 'create', resource: patient('c') },
      { op: 'create', resource: { resourceType: 'Observation', id: 'o1', status: 'final' } },
    ]);
    const alice = await storage.createUser('p1', newUser('alice'));
    await storage.createMembership('p1', { projectId: 'p1', admin: true, userId: alice.id });
    expect(await storage.useOnce('jti-1', Date.now() + 60_000)).toBe(true);

    const target = path.join(tempDir('fpk-backup-to-'), 'copy');
    const backup = await storage.backup(target);
    expect(backup).toMatchObject({ dir: target });
    expect(backup.logs).toBeGreaterThanOrEqual(5);
    expect(backup.bytes).toBeGreaterThan(0);
    expect(Date.parse(backup.takenAt)).not.toBeNaN();
    // Nothing else is left next to it (the temporary directory was renamed).
    expect(fs.readdirSync(path.dirname(target))).toEqual(['copy']);

    // The store goes on; these are not in the backup.
    await storage.updateResource('p1', patient('a', 'v3'));
    await storage.createResource('p1', patient('d'));
    await storage.deleteProject('p2');
    await storage.close();

    const copy = await fileStorage({ dir: target });
    try {
      expect(await patients(copy)).toEqual(['a:v2@2']);
      await expect(copy.readResource('p1', 'Patient', 'b')).rejects.toMatchObject({ deleted: true });
      expect((await copy.listProjects()).map((p) => p.id).sort()).toEqual(['p1', 'p2']);
      expect(await patients(copy, 'p2')).toEqual(['c:c@1']);
      expect(await copy.readResource('p2', 'Observation', 'o1')).toMatchObject({ status: 'final' });
      expect((await copy.listUsers('p1')).map((u) => u.userName)).toEqual(['alice']);
      expect(await copy.listMemberships('p1')).toMatchObject([{ userId: alice.id, admin: true }]);
      // One-time values too: a replayed token stays refused in the restored store.
      expect(await copy.useOnce('jti-1', Date.now() + 60_000)).toBe(false);
      // The copy is a store of its own.
      await copy.updateResource('p1', patient('a', 'v3b'));
      expect(await patients(copy)).toEqual(['a:v3b@3']);
    } finally {
      await copy.close();
    }
    const original = await fileStorage({ dir: storage.descriptor!.options.dir as string });
    try {
      expect(await patients(original)).toEqual(['a:v3@3', 'd:d@1']);
    } finally {
      await original.close();
    }
  });

  it('keeps the SMART grants as they were, and the copy builds its search postings again', async () => {
    const storage = await newStore();
    const hour = Date.now() + 3_600_000;
    const grant = (kind: 'refresh' | 'revoked-token', key: string) => ({
      kind,
      key,
      projectId: 'p1',
      clientId: 'c1',
      expiresAt: hour,
      data: { scope: 'openid' },
    });
    await storage.grants.put(grant('refresh', 'r1'));
    await storage.grants.put(grant('revoked-token', 'jti-9'));
    await storage.writeResources(
      'p1',
      ['Smith', 'Smythe', 'Jones'].map((family, i) => ({
        op: 'create' as const,
        resource: patient(`s${i}`, family),
      })),
    );
    const { query } = await parseSearch('Patient', [['name', 'sm']], {}, allReads());
    expect((await storage.searchResources('p1', 'Patient', query)).total).toBe(2);
    const target = path.join(tempDir('fpk-backup-to-'), 'copy');
    await storage.backup(target);
    // After the freeze: in neither the copy's grants nor its resources.
    await storage.grants.put(grant('refresh', 'r2'));
    await storage.grants.take('refresh', 'r1');
    await storage.createResource('p1', patient('s9', 'Smart'));
    await storage.close();

    const copy = await fileStorage({ dir: target });
    try {
      expect(await copy.grants.get('refresh', 'r1')).toMatchObject({ projectId: 'p1', clientId: 'c1' });
      expect(await copy.grants.get('revoked-token', 'jti-9')).toBeDefined();
      expect(await copy.grants.get('refresh', 'r2')).toBeUndefined();
      // No postings were copied: the first search builds them, then writes post to them.
      const page = await copy.searchResources(
        'p1',
        'Patient',
        (await parseSearch('Patient', [['name', 'sm']], {}, allReads())).query,
      );
      expect(page.resources.map((r) => r.id).sort()).toEqual(['s0', 's1']);
      await copy.createResource('p1', patient('s5', 'Smolensk'));
      const again = await copy.searchResources(
        'p1',
        'Patient',
        (await parseSearch('Patient', [['name', 'smo']], {}, allReads())).query,
      );
      expect(again.resources.map((r) => r.id)).toEqual(['s5']);
    } finally {
      await copy.close();
    }
    // A clean close of the copy saves its postings; it reopens with them and the grants.
    const reopened = await fileStorage({ dir: target });
    try {
      expect(
        fs
          .readdirSync(path.join(target, 'projects'), { recursive: true })
          .some((f) => String(f).endsWith('.postings')),
      ).toBe(false);
      const page = await reopened.searchResources(
        'p1',
        'Patient',
        (await parseSearch('Patient', [['name', 'sm']], {}, allReads())).query,
      );
      expect(page.resources.map((r) => r.id).sort()).toEqual(['s0', 's1', 's5']);
      expect(await reopened.grants.get('refresh', 'r1')).toBeDefined();
    } finally {
      await reopened.close();
    }
  });

  it('taken while writes and compactions run: a consistent cut, holding every write acknowledged before it', async () => {
    // Every update supersedes a record: compaction rewrites the log after nearly every batch.
    const storage = await newStore(undefined, 0);
    for (let i = 0; i < 20; i++) await storage.createResource('p1', patient(`s${i}`, 'v0'));
    let stop = false;
    const acknowledged: string[] = [];
    const writer = (async () => {
      for (let n = 1; !stop; n++) {
        // A transaction: the Patient's new version and an Observation naming it, both or neither.
        const id = `s${n % 20}`;
        await storage.writeResources('p1', [
          { op: 'update', resource: patient(id, `v${n}`) },
          {
            op: 'create',
            resource: {
              resourceType: 'Observation',
              id: `obs-${n}`,
              status: 'final',
              note: [{ text: `${id}:v${n}` }],
            },
          },
        ]);
        acknowledged.push(`obs-${n}`);
      }
    })();
    await eventually('30 acknowledged writes', () => acknowledged.length >= 30);
    const before = [...acknowledged];
    const target = path.join(tempDir('fpk-backup-to-'), 'copy');
    await storage.backup(target);
    stop = true;
    await writer;
    await storage.close();

    const copy = await fileStorage({ dir: target });
    try {
      const observations = (await copy.searchResources('p1', 'Observation', { count: 100_000 })).resources;
      const ids = new Set(observations.map((o) => o.id));
      for (const id of before) expect(ids.has(id), id).toBe(true);
      // A prefix of the writes: obs-1 … obs-k, nothing missing in between.
      expect([...ids].map((id) => Number(id.slice(4))).sort((a, b) => a - b)).toEqual(
        Array.from({ length: ids.size }, (_, i) => i + 1),
      );
      // Each Patient is at the version its last Observation in the copy names (the same batch).
      const last = new Map<string, string>();
      for (const o of observations.sort((a, b) => Number(a.id.slice(4)) - Number(b.id.slice(4)))) {
        const note = (o as unknown as { note: { text: string }[] }).note[0]!.text;
        const [id, version] = note.split(':') as [string, string];
        last.set(id, version);
      }
      for (const p of await patients(copy)) {
        const [id, rest] = p.split(':') as [string, string];
        expect(rest.split('@')[0]).toBe(last.get(id) ?? 'v0');
      }
    } finally {
      await copy.close();
    }
  });

  it('the project deleted while its log is being copied: the copy still reads the file it pinned', async () => {
    const dir = tempDir('fpk-backup-');
    let deletion: Promise<void> | undefined;
    // When the backup opens its copy of the Patient log, p1 is deleted: the deletion's batch retires
    // (closes, unless pinned) every open file of p1's logs while the copy reads them.
    const hook: FaultHook = (op, file) => {
      if (op === 'open' && file.includes('.tmp-') && file.endsWith('Patient.log')) {
        deletion ??= storage.deleteProject('p1');
      }
    };
    const storage = await createFileStorage({ dir, compartment: R4_PATIENT_COMPARTMENT }, undefined, {
      faults: hook,
    });
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    // 1,000 Patients of about 20 KB: a 20 MB log, copied in 1 MiB reads.
    const text = { status: 'generated', div: `<div>${'x'.repeat(20_000)}</div>` };
    for (let i = 0; i < 10; i++) {
      await storage.writeResources(
        'p1',
        Array.from({ length: 100 }, (_, j) => ({
          op: 'create' as const,
          resource: { ...patient(`s${i * 100 + j}`), text },
        })),
      );
    }
    const { dir: target } = await storage.backup(path.join(tempDir('fpk-backup-to-'), 'copy'));
    expect(deletion).toBeDefined();
    await deletion;
    await expect(storage.readProject('p1')).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });
    await storage.close();
    const copy = await fileStorage({ dir: target });
    try {
      expect(await patients(copy)).toHaveLength(1000);
    } finally {
      await copy.close();
    }
  });

  it('an export in flight at the backup: its job ends in the copy (failed: snapshots are not copied)', async () => {
    const storage = await newStore();
    await storage.createResource('p1', patient('a'));
    const snapshot = await storage.exportSnapshot('p1');
    const exportDir = tempDir('fpk-backup-exports-');
    const jobId = randomUUID();
    // A system-level export of Patients, as a kick-off on a router with this exportDir plans it.
    const plan = {
      params: { level: 'system', outputFormat: 'application/fhir+ndjson', lenient: false },
      types: ['Patient'],
      issues: [],
      exportDir,
      ownerKind: 'client',
    };
    await storage.createExportJob({
      id: jobId,
      projectId: 'p1',
      ownerId: 'c',
      status: 'in-progress',
      request: 'http://x/fhir/R4/$export',
      transactionTime: snapshot.takenAt,
      params: plan,
      snapshot,
    });
    const target = path.join(tempDir('fpk-backup-to-'), 'copy');
    await storage.backup(target);
    await storage.close();
    expect(fs.existsSync(path.join(target, 'snapshots'))).toBe(false);

    /** Opens the store in `dir` under a bulk router, which resumes the job; answers how it ended. */
    const resumed = async (dir: string) => {
      const store = await fileStorage({ dir });
      const { router } = createApp(store, { exportDir });
      try {
        return await eventually(
          'the resumed export to end',
          async () => {
            const job = await store.readExportJob('p1', jobId);
            return job.status !== 'accepted' && job.status !== 'in-progress' && job;
          },
          { intervalMs: 50 },
        );
      } finally {
        await router.close();
        await store.close();
      }
    };
    const inCopy = await resumed(target);
    expect(inCopy.status).toBe('failed');
    expect(inCopy.failure).toMatchObject({ resourceType: 'OperationOutcome' });
    // The same job in the original store, whose snapshot is there, completes.
    const inOriginal = await resumed(storage.descriptor!.options.dir as string);
    expect(inOriginal.failure ?? {}).toEqual({});
    expect(inOriginal.status).toBe('completed');
  });

  it('refuses a target that exists, lies inside the store or has no parent; a closed store', async () => {
    const dir = tempDir('fpk-backup-');
    const storage = await newStore(dir);
    const elsewhere = tempDir('fpk-backup-to-');
    await expect(storage.backup(elsewhere)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION' });
    await expect(storage.backup(path.join(dir, 'backup'))).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
    });
    await expect(storage.backup(dir)).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION' });
    // A name that merely starts with two dots is still inside.
    await expect(storage.backup(path.join(dir, '..backup'))).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
    });
    expect(fs.existsSync(path.join(dir, '..backup'))).toBe(false);
    await expect(storage.backup(path.join(elsewhere, 'no', 'copy'))).rejects.toMatchObject({
      code: 'ERR_INVALID_OPTION',
    });
    await expect(storage.backup('')).rejects.toMatchObject({ code: 'ERR_INVALID_OPTION' });
    expect(fs.readdirSync(elsewhere)).toEqual([]);
    await storage.close();
    await expect(storage.backup(path.join(elsewhere, 'copy'))).rejects.toMatchObject({
      code: 'ERR_STORAGE_CLOSED',
    });
  });

  it('a full disk during the copy: StorageUnavailableError, nothing left at the target, the store unharmed', async () => {
    const plan = new FaultPlan();
    const dir = tempDir('fpk-backup-');
    const storage = (await openFaultyStore(dir, plan)) as FileStore;
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    await storage.createResource('p1', patient('a'));
    await storage.createResource('p1', { resourceType: 'Observation', id: 'o1', status: 'final' });
    const parent = tempDir('fpk-backup-to-');
    const target = path.join(parent, 'copy');
    // commit.log is written as commit.log.tmp, then renamed.
    for (const file of [/Observation\.log$/, /directory\.json$/, /commit\.log\.tmp$/]) {
      plan.fail({ op: ['write', 'fsync'], file: new RegExp(`^${parent}.*${file.source}`), code: 'ENOSPC' });
      await expectUnavailable(storage.backup(target), 'ENOSPC');
      expect(fs.readdirSync(parent)).toEqual([]);
      plan.clear();
    }
    plan.fail({ op: 'rename', file: target, code: 'EIO', times: 1 });
    await expectUnavailable(storage.backup(target), 'EIO');
    expect(fs.readdirSync(parent)).toEqual([]);
    // The store was never touched: it writes, and a backup after the fault works.
    await storage.createResource('p1', patient('b'));
    await storage.backup(target);
    await storage.close();
    const copy = await fileStorage({ dir: target });
    expect(await patients(copy)).toEqual(['a:a@1', 'b:b@1']);
    await copy.close();
  });
});

const killedBackup = fileURLToPath(new URL('./fixtures/backup-killed.ts', import.meta.url));

/** A pid of no process: a child that has exited (and been reaped). */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid;
}

describe('fileStorage backup: temporary directories left behind', () => {
  it('a backup killed mid-copy: the next backup into the same parent removes its temporary directory', async () => {
    const dir = tempDir('fpk-backup-');
    const storage = await newStore(dir);
    await storage.createResource('p1', patient('a'));
    await storage.close();
    const parent = tempDir('fpk-backup-to-');
    const child = spawn(process.execPath, ['--import', 'tsx', killedBackup, dir, path.join(parent, 'copy')], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((resolve) => child.on('exit', resolve));
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('copying')) resolve();
      });
      child.on('exit', () => reject(new Error(`the backup ended before copying: ${stderr}`)));
    });
    child.kill('SIGKILL');
    await exited;
    const [left, ...more] = fs.readdirSync(parent);
    expect(more).toEqual([]);
    expect(left).toMatch(/^\.copy\.tmp-/);
    expect(fs.readdirSync(path.join(parent, left!))).toContain('projects');

    const again = await fileStorage({ dir });
    try {
      await again.backup(path.join(parent, 'copy'));
    } finally {
      await again.close();
    }
    expect(fs.readdirSync(parent)).toEqual(['copy']);
  });

  it('keeps the temporary directory of a backup under way (in this process or another live one) and other names', async () => {
    const dir = tempDir('fpk-backup-');
    const parent = tempDir('fpk-backup-to-');
    let second: Promise<unknown> | undefined;
    // When the first backup opens its first copied file, a second backup into the same parent
    // starts, and looks for temporary directories left behind while the first one writes its own.
    const hook: FaultHook = (op, file) => {
      if (op === 'open' && file.startsWith(parent)) second ??= storage.backup(path.join(parent, 'second'));
    };
    const storage = await createFileStorage({ dir, compartment: R4_PATIENT_COMPARTMENT }, undefined, {
      faults: hook,
    });
    await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
    // 250 Patients of about 20 KB: a 5 MB log to copy.
    const text = { status: 'generated', div: `<div>${'x'.repeat(20_000)}</div>` };
    await storage.writeResources(
      'p1',
      Array.from({ length: 250 }, (_, i) => ({
        op: 'create' as const,
        resource: { ...patient(`s${i}`), text },
      })),
    );
    const dead = `.first.tmp-${deadPid()}-${randomUUID()}`;
    // A backup of another process that still runs (the test runner's parent).
    const live = `.first.tmp-${process.ppid}-${randomUUID()}`;
    // Left by an earlier process that had this pid (a restarted container): no backup here writes it.
    const reused = `.first.tmp-${process.pid}-${randomUUID()}`;
    // Names not of a backup's temporary directory.
    const others = ['.first.tmp', `.first.tmp-${deadPid()}`, `first.tmp-${deadPid()}-${randomUUID()}`];
    for (const name of [dead, live, reused, ...others])
      fs.mkdirSync(path.join(parent, name, 'projects'), { recursive: true });

    await storage.backup(path.join(parent, 'first'));
    expect(second).toBeDefined();
    await second;
    await storage.close();
    expect(fs.readdirSync(parent).sort()).toEqual(['first', 'second', live, ...others].sort());
    for (const name of ['first', 'second']) {
      const copy = await fileStorage({ dir: path.join(parent, name) });
      try {
        expect(await patients(copy)).toHaveLength(250);
      } finally {
        await copy.close();
      }
    }
  });
});
