import { compartmentSearch, identifierFilter, typeSearch } from '../../src/storage/search-request.js';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { fileStorage, openFileExportReader } from '../../src/stores.js';
import { decodeIndexFile, encodeIndexFile } from '../../src/storage/file/log-index.js';
import { LogFile } from '../../src/storage/file/log-file.js';
import { encodeRecord } from '../../src/storage/file/record.js';
import type { ExportReader, IdentifierToken, Storage } from '../../src/storage/types.js';
import { collect, collectNdjson, runStorageContract } from '../../src/testing/storage-contract.js';
import { PATIENCE_MS } from '../helpers/eventually.js';
import { tempDir } from '../helpers/temp-dir.js';

runStorageContract('fileStorage', async () => {
  const dir = tempDir('fpk-file-contract-');
  const storage = await fileStorage({ dir, durability: 'write' });
  return {
    storage,
    cleanup: async () => {
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

function code(error: unknown): string | undefined {
  return (error as { code?: string }).code;
}

/** The `<kind>.log` record log of the only project directory. */
function recordLog(dir: string, kind: string): string {
  const [project] = fs.readdirSync(path.join(dir, 'projects'));
  return path.join(dir, 'projects', project!, `${kind}.log`);
}

function exportJob(id: string) {
  return {
    id,
    projectId: 'p1',
    ownerId: 'test',
    status: 'in-progress' as const,
    request: 'http://localhost/$export',
    transactionTime: '2026-01-01T00:00:00.000Z',
    params: {},
  };
}

/** Every file under `dir/projects/<project dir>/resources` named `<type>.log`. */
function logFile(dir: string, type: string): string {
  for (const project of fs.readdirSync(path.join(dir, 'projects'))) {
    const file = path.join(dir, 'projects', project, 'resources', `${type}.log`);
    if (fs.existsSync(file)) return file;
  }
  throw new Error(`no ${type} log`);
}

function usersLog(dir: string): string {
  for (const project of fs.readdirSync(path.join(dir, 'projects'))) {
    const file = path.join(dir, 'projects', project, 'users.log');
    if (fs.existsSync(file)) return file;
  }
  throw new Error('no users log');
}

const user = (userName: string) => ({
  projectId: 'p1',
  userName,
  userType: 'Patient' as const,
  profileId: `pat-${userName}`,
  active: true,
  data: { name: { givenName: userName } },
});

describe('fileStorage', () => {
  const open: Storage[] = [];
  async function openStore(
    dir: string,
    options: { compactionMinDeadBytes?: number; durability?: 'fsync' | 'write' } = {},
  ) {
    // Compaction tests: `{ versions: 1 }`, the retention under which compaction drops every old version.
    const history = options.compactionMinDeadBytes !== undefined ? { history: { versions: 1 } } : {};
    const storage = await fileStorage({ dir, ...history, ...options });
    open.push(storage);
    return storage;
  }
  afterEach(async () => {
    for (const storage of open.splice(0)) await storage.close();
  });

  it('keeps everything across close and reopen (fsync durability)', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createProject({ id: 'p1', name: 'One', strictMode: true });
    await storage.updateProject('p1', { scim: { defaultUserType: 'Practitioner', echoUserName: true } });
    const importSources = [
      {
        url: 'https://source.example.org/fhir',
        tokenUrl: 'https://source.example.org/token',
        clientId: 'platform',
        privateKey: { kty: 'EC', crv: 'P-384', x: 'x', y: 'y', d: 'd' },
      },
    ];
    await storage.updateProject('p1', { importSources });
    const alice = await storage.createUser('p1', { ...user('Alice'), externalId: 'e-1' });
    await storage.updateUser('p1', alice.id, { active: false });
    const bob = await storage.createUser('p1', user('bob'));
    await storage.deleteUser('p1', bob.id);
    await storage.createMembership('p1', { projectId: 'p1', userId: alice.id, admin: true });
    await storage.createClient({
      id: 'c1',
      projectId: 'p1',
      name: 'c',
      scope: 's',
      admin: false,
      superAdmin: false,
    });
    await storage.saveSigningKey({
      kid: 'k',
      alg: 'ES256',
      privateJwk: {},
      publicJwk: {},
      createdAt: '2024-01-01T00:00:00.000Z',
    });
    expect(await storage.useOnce('jti', Date.now() + 60_000)).toBe(true);
    const p = await storage.createResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      name: [{ family: 'Ünïcødé' }],
    });
    const { resource: p2 } = await storage.updateResource('p1', { ...p, active: true });
    await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'o1',
      subject: { reference: 'Patient/a' },
    });
    await storage.createResource('p1', { resourceType: 'Observation', id: 'o2' });
    await storage.deleteResource('p1', 'Observation', 'o2');
    const snapshot = await storage.exportSnapshot('p1');
    // Snapshots survive a restart when an export job holds them; others are collected.
    await storage.createExportJob({
      id: 'job',
      projectId: 'p1',
      ownerId: 'c1',
      status: 'in-progress',
      request: 'http://x/$export',
      transactionTime: snapshot.takenAt,
      params: {},
      snapshot,
    });
    const orphan = await storage.exportSnapshot('p1');
    await storage.close();

    storage = await openStore(dir);
    expect(fs.existsSync(path.join(dir, orphan.dir as string))).toBe(false);
    expect((await storage.readProject('p1')).strictMode).toBe(true);
    expect((await storage.readProject('p1')).scim).toEqual({
      defaultUserType: 'Practitioner',
      echoUserName: true,
    });
    expect((await storage.readProject('p1')).importSources).toEqual(importSources);
    expect((await storage.readUser('p1', alice.id)).active).toBe(false);
    expect(await storage.findUsers('p1', { userName: 'ALICE' })).toHaveLength(1);
    expect(await storage.findUsers('p1', { externalId: 'e-1' })).toHaveLength(1);
    expect(await storage.findUsers('p1', { userName: 'bob' })).toEqual([]);
    expect(await storage.listMemberships('p1')).toHaveLength(1);
    expect((await storage.readClient('c1')).scope).toBe('s');
    expect(await storage.listSigningKeys()).toHaveLength(1);
    expect(await storage.useOnce('jti', Date.now() + 60_000)).toBe(false);
    expect(await storage.readResource('p1', 'Patient', 'a')).toEqual(p2);
    await expect(storage.readResource('p1', 'Observation', 'o2')).rejects.toMatchObject({ deleted: true });
    expect(
      (
        await storage.searchResources('p1', 'Observation', {
          search: compartmentSearch('Observation', ['a']),
        })
      ).total,
    ).toBe(1);
    // The version counter and the clock continue.
    const { resource: p3 } = await storage.updateResource('p1', { ...p2, active: false });
    expect(p3.meta.versionId).toBe('3');
    expect(p3.meta.lastUpdated > p2.meta.lastUpdated).toBe(true);
    // A snapshot taken before the restart still reads.
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' }),
    );
    expect(rows).toEqual([p2]);
    await storage.releaseSnapshot(snapshot);
    expect(fs.existsSync(path.join(dir, snapshot.dir as string))).toBe(false);
  });

  it('refuses a second open of the same directory and takes over a stale lock', async () => {
    const dir = tempDir('fpk-file-storage-');
    const storage = await openStore(dir);
    const error = await fileStorage({ dir }).catch((e: unknown) => e);
    expect(code(error)).toBe('ERR_STORAGE_LOCKED');
    await storage.close();
    // A lock left by a process that no longer exists.
    fs.writeFileSync(path.join(dir, 'lock'), '2147483646 stale-token\n');
    let again = await openStore(dir);
    await again.createResource('p1', { resourceType: 'Patient' });
    await again.close();
    // A lock naming this very pid but another process incarnation (pid reused after a restart).
    fs.writeFileSync(
      path.join(dir, 'lock'),
      `${process.pid} old-token 00000000-0000-0000-0000-000000000000/1\n`,
    );
    again = await openStore(dir);
    expect((await again.searchResources('p1', 'Patient')).total).toBe(1);
  });

  it('takes over a lock whose process was killed but not yet reaped (a zombie)', async () => {
    const dir = tempDir('fpk-file-storage-');
    await (await openStore(dir)).close();
    // `sh` starts a child, prints its pid, then becomes `sleep 30`, which never reaps it: the
    // child, ending a second later (after the exec, so the shell cannot reap it first), stays a
    // zombie, still answering signal 0, until the sleeper is killed.
    const parent = spawn('sh', ['-c', 'sleep 1 & echo $!; exec sleep 30'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const [line] = (await once(parent.stdout, 'data')) as [Buffer];
      const zombie = Number.parseInt(line.toString(), 10);
      // Fields after the command name: state is the first, start time the twentieth.
      const fields = () => {
        const stat = fs.readFileSync(`/proc/${zombie}/stat`, 'utf8');
        return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      };
      await vi.waitFor(() => expect(fields()[0]).toBe('Z'), { timeout: PATIENCE_MS, interval: 50 });
      const start = fields()[19];
      const bootId = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
      fs.writeFileSync(path.join(dir, 'lock'), `${zombie} dead-token ${bootId}/${start}\n`);
      const again = await openStore(dir);
      await again.createResource('p1', { resourceType: 'Patient' });
      await again.close();
    } finally {
      parent.kill('SIGKILL');
    }
  });

  it('repairs a torn tail of a resource log and of a users log', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    const kept = await storage.createResource('p1', { resourceType: 'Patient', id: 'kept' });
    await storage.createUser('p1', user('kept'));
    await storage.close();
    const log = logFile(dir, 'Patient');
    const size = fs.statSync(log).size;
    // Half a record, then garbage.
    const half = encodeRecord(99, Date.now() * 1000, 'C', '{"resourceType":"Patient","id":"torn"}').subarray(
      0,
      30,
    );
    fs.appendFileSync(log, half);
    fs.appendFileSync(usersLog(dir), Buffer.from('garbage without newline'));
    storage = await openStore(dir);
    expect(fs.statSync(log).size).toBe(size);
    expect(await storage.readResource('p1', 'Patient', 'kept')).toEqual(kept);
    expect(await storage.findUsers('p1', { userName: 'kept' })).toHaveLength(1);
    // Writes after the repair land on a clean tail.
    await storage.createResource('p1', { resourceType: 'Patient', id: 'after' });
    await storage.createUser('p1', user('after'));
    await storage.close();
    storage = await openStore(dir);
    expect((await storage.searchResources('p1', 'Patient')).total).toBe(2);
    expect(await storage.listUsers('p1')).toHaveLength(2);
  });

  it('drops a corrupt record (bad CRC) and everything after it', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await storage.close();
    const log = logFile(dir, 'Patient');
    const good = encodeRecord(
      1,
      Date.now() * 1000,
      'C',
      '{"resourceType":"Patient","id":"bad","meta":{"versionId":"1","lastUpdated":"x"}}',
    );
    good[60] = 0x21; // flip a byte of the JSON
    fs.appendFileSync(log, good);
    storage = await openStore(dir);
    expect((await storage.searchResources('p1', 'Patient')).resources.map((r) => r.id)).toEqual(['a']);
  });

  it('discards a batch whose commit was never recorded', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await storage.close();
    const log = logFile(dir, 'Patient');
    const size = fs.statSync(log).size;
    // A complete, valid record from batch seq 1000, which commit.log never acknowledged.
    const iso = new Date().toISOString();
    fs.appendFileSync(
      log,
      encodeRecord(
        1000,
        Date.now() * 1000,
        'C',
        JSON.stringify({ resourceType: 'Patient', id: 'ghost', meta: { versionId: '1', lastUpdated: iso } }),
      ),
    );
    storage = await openStore(dir);
    await expect(storage.readResource('p1', 'Patient', 'ghost')).rejects.toMatchObject({
      code: 'ERR_STORAGE_NOT_FOUND',
    });
    expect(fs.statSync(log).size).toBe(size);
  });

  it('opens from the index a clean close leaves, scanning only records appended after it', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createResource('p1', {
      resourceType: 'Observation',
      id: 'a',
      subject: { reference: 'Patient/x' },
    });
    await storage.createResource('p1', { resourceType: 'Observation', id: 'b', value: 1 });
    await storage.deleteResource('p1', 'Observation', 'gone');
    await storage.createResource('p1', { resourceType: 'Observation', id: 'gone' });
    await storage.deleteResource('p1', 'Observation', 'gone');
    await storage.close();
    const log = logFile(dir, 'Observation');
    expect(fs.existsSync(`${log}.idx`)).toBe(true);
    const oldIndex = decodeIndexFile(fs.readFileSync(`${log}.idx`, 'utf8'))!;
    storage = await openStore(dir);
    // The index is consumed on open.
    expect(fs.existsSync(`${log}.idx`)).toBe(false);
    await storage.updateResource('p1', { resourceType: 'Observation', id: 'b', value: 2 });
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'a',
      subject: { reference: 'Patient/y' },
    });
    await storage.createResource('p1', { resourceType: 'Observation', id: 'c' });
    await storage.close();
    // An index older than the log (as if the last run had crashed after appending): the records
    // after it are scanned and the versions they replace get their marks.
    // (Renaming an entry in it shows that the index, not a scan, is what gets loaded.)
    const renamed = JSON.parse(JSON.stringify(oldIndex).replace('"gone"', '"ghost"')) as typeof oldIndex;
    fs.writeFileSync(`${log}.idx`, encodeIndexFile(renamed));
    const size = fs.statSync(log).size;
    fs.appendFileSync(log, Buffer.from('torn tail'));
    storage = await openStore(dir);
    expect(fs.statSync(log).size).toBe(size);
    const page = await storage.searchResources('p1', 'Observation', { sort: '_id' });
    expect(page.resources.map((r) => [r.id, r.meta.versionId])).toEqual([
      ['a', '2'],
      ['b', '2'],
      ['c', '1'],
    ]);
    expect((await storage.readResource('p1', 'Observation', 'b')).value).toBe(2);
    await expect(storage.readResource('p1', 'Observation', 'ghost')).rejects.toMatchObject({ deleted: true });
    expect(
      (
        await storage.searchResources('p1', 'Observation', {
          search: compartmentSearch('Observation', ['y']),
        })
      ).total,
    ).toBe(1);
    expect(
      (
        await storage.searchResources('p1', 'Observation', {
          search: compartmentSearch('Observation', ['x']),
        })
      ).total,
    ).toBe(0);
    const snapshot = await storage.exportSnapshot('p1');
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, { resourceType: 'Observation' }),
    );
    expect(rows.map((r) => [r.id, r.meta.versionId]).sort()).toEqual([
      ['a', '2'],
      ['b', '2'],
      ['c', '1'],
    ]);
    const deleted = await collect(
      storage.exportReader.readDeleted('p1', snapshot, { resourceType: 'Observation' }),
    );
    expect(deleted.map((t) => t.id)).toEqual(['gone']);
    // A later write continues the versions.
    const { resource } = await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'b',
      value: 3,
    });
    expect(resource.meta.versionId).toBe('3');
  });

  it('keeps the identifier index across reopen: from the index file, from a scan, never from an older index format', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir, { compactionMinDeadBytes: 0 });
    await storage.writeResources('p1', [
      {
        op: 'create',
        resource: { resourceType: 'Observation', id: 'a', identifier: [{ system: 'urn:lab', value: '1' }] },
      },
      {
        op: 'create',
        resource: {
          resourceType: 'Observation',
          id: 'b',
          identifier: [{ system: 'urn:lab', value: '2' }, { value: 'free' }],
        },
      },
      {
        op: 'create',
        resource: { resourceType: 'Observation', id: 'c', identifier: { system: 'urn:x', value: '1' } },
      },
    ]);
    // Updates that change the identifiers, then a delete; compaction (min 0) rewrites the log meanwhile.
    for (const value of ['5', '6', '7', '8', '9']) {
      await storage.updateResource('p1', {
        resourceType: 'Observation',
        id: 'a',
        identifier: [{ system: 'urn:lab', value }],
      });
    }
    await storage.deleteResource('p1', 'Observation', 'c');
    const expected = {
      'urn:lab|1': [],
      'urn:lab|9': ['a'],
      'urn:lab|': ['a', 'b'],
      '1': [],
      free: ['b'],
      '|free': ['b'],
    };
    const tokens: Record<string, IdentifierToken> = {
      'urn:lab|1': { system: 'urn:lab', value: '1' },
      'urn:lab|9': { system: 'urn:lab', value: '9' },
      'urn:lab|': { system: 'urn:lab' },
      '1': { value: '1' },
      free: { value: 'free' },
      '|free': { system: null, value: 'free' },
    };
    const found = async () => {
      const out: Record<string, string[]> = {};
      for (const [name, token] of Object.entries(tokens)) {
        const page = await storage.searchResources('p1', 'Observation', {
          search: typeSearch('Observation', [identifierFilter([token])]),
          sort: '_id',
        });
        out[name] = page.resources.map((r) => r.id);
      }
      return out;
    };
    expect(await found()).toEqual(expected);
    const log = logFile(dir, 'Observation');
    // Compacted: fewer records than the 9 written.
    expect(fs.readFileSync(log, 'utf8').split('\n').length - 1).toBeLessThan(9);
    await storage.close();
    const index = decodeIndexFile(fs.readFileSync(`${log}.idx`, 'utf8'))!;
    expect(index.format).toBe(2);
    // From the index file (a clean close).
    storage = await openStore(dir);
    expect(await found()).toEqual(expected);
    await storage.close();
    // An index of the previous format (no identifier keys in its entries) is not used: the log is scanned.
    const old = decodeIndexFile(fs.readFileSync(`${log}.idx`, 'utf8')) as unknown as {
      format: number;
      entries: unknown[][];
    };
    old.format = 1;
    for (const entry of old.entries) entry.length = 7;
    fs.writeFileSync(`${log}.idx`, encodeIndexFile(old as never));
    storage = await openStore(dir);
    expect(await found()).toEqual(expected);
    // After a crash (no index file): a scan, and writes after reopening keep the index right.
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'b',
      identifier: [{ value: 'free' }],
    });
    await storage.close();
    fs.rmSync(`${log}.idx`);
    storage = await openStore(dir);
    expect(await found()).toEqual({ ...expected, 'urn:lab|': ['a'] });
  });

  it('recomputes wrong superseded-at marks on open', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a', active: false });
    const { resource: latest } = await storage.updateResource('p1', {
      resourceType: 'Patient',
      id: 'a',
      active: true,
    });
    await storage.close();
    const log = logFile(dir, 'Patient');
    const bytes = fs.readFileSync(log);
    // Reset the first record's mark to "current" (a lost in-place write), as after a crash (no
    // index file from a clean close).
    fs.rmSync(`${log}.idx`, { force: true });
    bytes.write('000000000000', 22, 'latin1');
    fs.writeFileSync(log, bytes);
    storage = await openStore(dir);
    const snapshot = await storage.exportSnapshot('p1');
    expect(
      await collectNdjson(storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' })),
    ).toEqual([latest]);
  });

  it('compacts a log without losing data or breaking running snapshots', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir, { compactionMinDeadBytes: 0 });
    for (let i = 0; i < 20; i++) {
      await storage.createResource('p1', {
        resourceType: 'Observation',
        id: `o${i}`,
        value: 0,
        subject: { reference: `Patient/p${i % 3}` },
      });
    }
    await storage.deleteResource('p1', 'Observation', 'o19');
    const before = await storage.exportSnapshot('p1', { patientIds: ['p0'] });
    const beforeRows = await collectNdjson(
      storage.exportReader.readResources('p1', before, { resourceType: 'Observation' }),
    );
    const log = logFile(dir, 'Observation');
    let biggest = 0;
    for (let round = 1; round <= 5; round++) {
      for (let i = 0; i < 19; i++) {
        await storage.updateResource('p1', {
          resourceType: 'Observation',
          id: `o${i}`,
          value: round,
          subject: { reference: `Patient/p${i % 3}` },
        });
      }
      biggest = Math.max(biggest, fs.statSync(log).size);
    }
    // Compaction ran: the log is far smaller than all the versions written.
    expect(fs.statSync(log).size).toBeLessThan(biggest);
    const current = await storage.searchResources('p1', 'Observation', { sort: '_id' });
    expect(current.total).toBe(19);
    expect(current.resources.every((r) => r.value === 5)).toBe(true);
    await expect(storage.readResource('p1', 'Observation', 'o19')).rejects.toMatchObject({ deleted: true });
    // The snapshot taken before still reads exactly what it saw.
    expect(
      await collectNdjson(storage.exportReader.readResources('p1', before, { resourceType: 'Observation' })),
    ).toEqual(beforeRows);
    const ofP0 = await collectNdjson(
      storage.exportReader.readResources('p1', before, { resourceType: 'Observation', patientIds: ['p0'] }),
    );
    expect(ofP0.map((r) => r.id).sort()).toEqual(['o0', 'o12', 'o15', 'o18', 'o3', 'o6', 'o9']);
    expect(ofP0.every((r) => r.value === 0)).toBe(true);
    const deleted = await collect(
      storage.exportReader.readDeleted('p1', before, { resourceType: 'Observation' }),
    );
    expect(deleted.map((t) => t.id)).toEqual(['o19']);
    await storage.close();
    storage = await openStore(dir);
    const reopened = await storage.searchResources('p1', 'Observation', { sort: '_id' });
    expect(reopened).toEqual(current);
    const after = await storage.exportSnapshot('p1');
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', after, { resourceType: 'Observation' }),
    );
    expect(rows).toHaveLength(19);
    const tombstones = await collect(
      storage.exportReader.readDeleted('p1', after, { resourceType: 'Observation' }),
    );
    expect(tombstones.map((t) => t.id)).toEqual(['o19']);
  });

  it('rewrites the users and one-time value logs once mostly dead', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir, { durability: 'write' });
    const u = await storage.createUser('p1', user('busy'));
    for (let i = 0; i < 1100; i++) await storage.updateUser('p1', u.id, { data: { i } });
    expect(fs.statSync(usersLog(dir)).size).toBeLessThan(50_000);
    expect(await storage.useOnce('live', Date.now() + 600_000)).toBe(true);
    for (let i = 0; i < 2200; i++) await storage.useOnce(`old-${i}`, Date.now() - 1);
    await storage.useOnce('trigger', Date.now() + 600_000);
    expect(fs.statSync(path.join(dir, 'once.log')).size).toBeLessThan(50_000);
    await storage.close();
    storage = await openStore(dir);
    expect((await storage.readUser('p1', u.id)).data).toEqual({ i: 1099 });
    expect(await storage.useOnce('live', Date.now() + 600_000)).toBe(false);
    expect(await storage.useOnce('old-5', Date.now() + 600_000)).toBe(true);
  });

  it('keeps memberships and export jobs in per-project logs, and rewrites them once mostly dead', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir, { durability: 'write' });
    const u = await storage.createUser('p1', user('member'));
    const m = await storage.createMembership('p1', { projectId: 'p1', userId: u.id, admin: false });
    const gone = await storage.createMembership('p1', { projectId: 'p1', userId: u.id, admin: true });
    await storage.deleteMembership('p1', gone.id);
    await storage.createExportJob(exportJob('busy'));
    for (let i = 0; i < 1100; i++) await storage.updateExportJob('p1', 'busy', { progress: { i } });
    const directory = JSON.parse(fs.readFileSync(path.join(dir, 'directory.json'), 'utf8')) as object;
    expect(directory).not.toHaveProperty('memberships');
    expect(directory).not.toHaveProperty('jobs');
    expect(fs.statSync(recordLog(dir, 'jobs')).size).toBeLessThan(200_000);
    await storage.close();
    storage = await openStore(dir);
    expect(await storage.listMemberships('p1')).toEqual([m]);
    expect((await storage.readExportJob('p1', 'busy')).progress).toEqual({ i: 1099 });
  });

  it('moves memberships and export jobs out of a directory.json written by an older version', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createResource('p1', { resourceType: 'Patient', id: 'kept' });
    const u = await storage.createUser('p1', user('member'));
    await storage.close();
    // The older layout: memberships and jobs inside directory.json, no logs of them.
    const file = path.join(dir, 'directory.json');
    const directory = JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, unknown>;
    const membership = {
      id: 'm1',
      projectId: 'p1',
      userId: u.id,
      admin: true,
      createdAt: '2026-01-01T00:00:00.000Z',
    };
    const job = {
      ...exportJob('old'),
      createdAt: '2026-01-01T00:00:00.000Z',
      updatedAt: '2026-01-01T00:00:00.000Z',
      version: 1,
    };
    directory.memberships = { p1: { m1: membership }, p2: {} };
    directory.jobs = { p1: { old: job } };
    fs.writeFileSync(file, JSON.stringify(directory));
    storage = await openStore(dir);
    expect(await storage.listMemberships('p1')).toEqual([membership]);
    expect(await storage.readExportJob('p1', 'old')).toEqual(job);
    const migrated = JSON.parse(fs.readFileSync(file, 'utf8')) as object;
    expect(migrated).not.toHaveProperty('memberships');
    expect(migrated).not.toHaveProperty('jobs');
    await storage.createMembership('p1', { id: 'm2', projectId: 'p1', userId: u.id, admin: false });
    await storage.close();
    storage = await openStore(dir);
    expect((await storage.listMemberships('p1')).map((m) => m.id).sort()).toEqual(['m1', 'm2']);
    expect((await storage.readExportJob('p1', 'old')).version).toBe(1);
    expect((await storage.readResource('p1', 'Patient', 'kept')).id).toBe('kept');
  });

  it('undoes a batch whose write fails and keeps working', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createResource('p1', { resourceType: 'Patient', id: 'a' });
    await storage.createResource('p1', { resourceType: 'Observation', id: 'o0' });
    const append = vi.spyOn(LogFile.prototype, 'append').mockRejectedValueOnce(new Error('disk full'));
    await expect(
      storage.writeResources('p1', [
        { op: 'create', resource: { resourceType: 'Patient', id: 'b' } },
        { op: 'create', resource: { resourceType: 'Observation', id: 'c' } },
      ]),
    ).rejects.toThrow('disk full');
    append.mockRestore();
    await expect(storage.readResource('p1', 'Patient', 'b')).rejects.toMatchObject({
      code: 'ERR_STORAGE_NOT_FOUND',
    });
    await storage.createResource('p1', { resourceType: 'Observation', id: 'd' });
    await storage.close();
    storage = await openStore(dir);
    expect((await storage.searchResources('p1', 'Patient')).resources.map((r) => r.id)).toEqual(['a']);
    expect((await storage.searchResources('p1', 'Observation')).resources.map((r) => r.id)).toEqual([
      'o0',
      'd',
    ]);
  });

  it('removes a deleted project from disk and keeps re-created ones apart', async () => {
    const dir = tempDir('fpk-file-storage-');
    let storage = await openStore(dir);
    await storage.createProject({ id: 'p1', name: 'x', strictMode: false });
    await storage.createResource('p1', { resourceType: 'Patient', id: 'old' });
    await storage.createUser('p1', user('old'));
    expect(fs.readdirSync(path.join(dir, 'projects'))).toHaveLength(1);
    await storage.transaction(async (tx) => {
      await tx.createProject({ id: 'p2', name: 'y', strictMode: false });
      await tx.createResource('p2', { resourceType: 'Patient', id: 'other' });
    });
    await storage.deleteProject('p1');
    await storage.createProject({ id: 'p1', name: 'again', strictMode: false });
    await storage.createResource('p1', { resourceType: 'Patient', id: 'new' });
    await storage.close();
    storage = await openStore(dir);
    expect((await storage.searchResources('p1', 'Patient')).resources.map((r) => r.id)).toEqual(['new']);
    expect(await storage.listUsers('p1')).toEqual([]);
    expect((await storage.searchResources('p2', 'Patient')).resources.map((r) => r.id)).toEqual(['other']);
    expect(fs.readdirSync(path.join(dir, 'projects'))).toHaveLength(2);
  });

  it('has a descriptor a worker can import to read snapshots', async () => {
    const dir = tempDir('fpk-file-storage-');
    const storage = await openStore(dir);
    for (let i = 0; i < 50; i++) {
      await storage.createResource('p1', {
        resourceType: 'Observation',
        id: `o${i}`,
        subject: { reference: `Patient/p${i % 5}` },
      });
    }
    const snapshot = JSON.parse(
      JSON.stringify(await storage.exportSnapshot('p1', { patientIds: ['p1', 'p2'] })),
    );
    const { descriptor } = storage;
    expect(descriptor?.exportName).toBe('openFileExportReader');
    const mod = (await import(descriptor!.module)) as Record<string, (options: unknown) => ExportReader>;
    const reader = mod[descriptor!.exportName]!(JSON.parse(JSON.stringify(descriptor!.options)));
    const all = await collectNdjson(reader.readResources('p1', snapshot, { resourceType: 'Observation' }));
    expect(all).toHaveLength(50);
    const group = await collectNdjson(
      reader.readResources('p1', snapshot, { resourceType: 'Observation', patientIds: ['p2'] }),
    );
    expect(group.map((r) => r.id).sort()).toEqual([
      'o12',
      'o17',
      'o2',
      'o22',
      'o27',
      'o32',
      'o37',
      'o42',
      'o47',
      'o7',
    ]);
    const both = await collectNdjson(
      reader.readResources('p1', snapshot, { resourceType: 'Observation', patientIds: ['p1', 'p2'] }),
    );
    expect(both).toHaveLength(20);
    // Patients not recorded in the snapshot fall back to a full pass.
    const other = await collectNdjson(
      reader.readResources('p1', snapshot, { resourceType: 'Observation', patientIds: ['p3'] }),
    );
    expect(other).toHaveLength(10);
    await expect(
      collect(reader.readResources('p2', snapshot, { resourceType: 'Observation' })),
    ).rejects.toMatchObject({
      code: 'ERR_STORAGE_INVALID',
    });
    await reader.close();
  });

  it('reads a small compartment by position and a large one in one pass', async () => {
    const dir = tempDir('fpk-file-storage-');
    const storage = await openStore(dir, { durability: 'write' });
    const writes = [];
    for (let i = 0; i < 200; i++) {
      writes.push({
        op: 'create' as const,
        resource: { resourceType: 'Observation', id: `o${i}`, subject: { reference: `Patient/p${i % 50}` } },
      });
    }
    await storage.writeResources('p1', writes);
    const small = await storage.exportSnapshot('p1', { patientIds: ['p7'] });
    await storage.updateResource('p1', {
      resourceType: 'Observation',
      id: 'o7',
      subject: { reference: 'Patient/p8' },
    });
    const ofP7 = await collectNdjson(
      storage.exportReader.readResources('p1', small, { resourceType: 'Observation', patientIds: ['p7'] }),
    );
    expect(ofP7.map((r) => r.id)).toEqual(['o7', 'o57', 'o107', 'o157']);
    const most = Array.from({ length: 40 }, (_, i) => `p${i}`);
    const large = await storage.exportSnapshot('p1', { patientIds: most });
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', large, { resourceType: 'Observation', patientIds: most }),
    );
    expect(rows).toHaveLength(160);
    expect(rows.find((r) => r.id === 'o7')!.subject).toEqual({ reference: 'Patient/p8' });
  });

  it('reads compartments in merged blocks, in file order, and reuses chunk buffers when asked', async () => {
    const dir = tempDir('fpk-file-storage-');
    const storage = await openStore(dir, { durability: 'write' });
    const writes: {
      op: 'create';
      resource: {
        resourceType: string;
        id: string;
        subject: { reference: string };
        note: { text: string }[];
      };
    }[] = [];
    for (let i = 0; i < 3000; i++) {
      // Mostly 2 KB records, some of 100 KB (gaps too wide to read over) and one over 1 MiB.
      const size = i === 700 ? 1_100_000 : i % 97 === 0 ? 100_000 : 2_000;
      writes.push({
        op: 'create' as const,
        resource: {
          resourceType: 'Observation',
          id: `o${i}`,
          subject: { reference: `Patient/p${i % 10}` },
          note: [{ text: 'x'.repeat(size) }],
        },
      });
    }
    await storage.writeResources('p1', writes);
    const expected = (patients: string[]) =>
      writes
        .map((w) => w.resource)
        .filter((r) => patients.includes(r.subject.reference.slice('Patient/'.length)))
        .map((r) => r.id);
    const reader = openFileExportReader({ dir, chunkBytes: 64 * 1024 });
    const exact = await storage.exportSnapshot('p1', { patientIds: ['p0'] });
    const wider = await storage.exportSnapshot('p1', { patientIds: ['p0', 'p3'] });
    const none = await storage.exportSnapshot('p1');
    for (const [snapshot, reuseChunks] of [
      [exact, true],
      [exact, false],
      [wider, true],
      [none, true],
    ] as const) {
      const buffers = new Set<ArrayBufferLike>();
      const ids: string[] = [];
      const read = reader.readResources('p1', snapshot, {
        resourceType: 'Observation',
        patientIds: ['p0'],
        reuseChunks,
      });
      for await (const chunk of read) {
        buffers.add((chunk.data as Uint8Array).buffer);
        // Decoded before the next chunk is asked for, as `reuseChunks` requires.
        const text = Buffer.from(chunk.data).toString('utf8');
        const lines = text.split('\n').slice(0, -1);
        expect(lines).toHaveLength(chunk.count);
        for (const line of lines) ids.push((JSON.parse(line) as { id: string }).id);
      }
      expect(ids).toEqual(expected(['p0']));
      if (reuseChunks) expect(buffers.size).toBeLessThanOrEqual(3);
      else expect(buffers.size).toBeGreaterThan(3);
    }
    // Both patients of the wider snapshot, by position.
    const both = await collectNdjson(
      reader.readResources('p1', wider, { resourceType: 'Observation', patientIds: ['p0', 'p3'] }),
    );
    expect(both.map((r) => r.id)).toEqual(expected(['p0', 'p3']));
    await reader.close();
  });

  it('exports large stores in chunks of whole lines', async () => {
    const dir = tempDir('fpk-file-storage-');
    const storage = await openStore(dir, { durability: 'write' });
    const writes = [];
    for (let i = 0; i < 3000; i++) {
      writes.push({
        op: 'create' as const,
        resource: { resourceType: 'Basic', id: `b${i}`, text: 'x'.repeat(i % 700) },
      });
    }
    await storage.writeResources('p1', writes);
    const deletes = Array.from({ length: 300 }, (_, i) => ({
      op: 'delete' as const,
      resourceType: 'Basic',
      id: `b${i * 10}`,
    }));
    await storage.writeResources('p1', deletes);
    await storage.writeResources(
      'p1',
      writes.filter((_, i) => i % 10 === 0 && i >= 1500),
    );
    const snapshot = await storage.exportSnapshot('p1');
    // Tombstones spread over more than one read block; re-created ids are not deletions.
    const tombstones = await collect(
      storage.exportReader.readDeleted('p1', snapshot, { resourceType: 'Basic' }),
    );
    expect(tombstones).toHaveLength(150);
    expect(new Set(tombstones.map((t) => t.id)).size).toBe(150);
    let chunks = 0;
    let lines = 0;
    for await (const chunk of storage.exportReader.readResources('p1', snapshot, { resourceType: 'Basic' })) {
      chunks += 1;
      lines += chunk.count;
    }
    expect(lines).toBe(2850);
    expect(chunks).toBeGreaterThan(1);
    const rows = await collectNdjson(
      storage.exportReader.readResources('p1', snapshot, { resourceType: 'Basic', since: 0 }),
    );
    expect(new Set(rows.map((r) => r.id)).size).toBe(2850);
  });
});
