import { compartmentSearch, identifierFilter, typeSearch } from '../../src/storage/search-request.js';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { fileStorage } from '../../src/stores.js';
import type { ExportSnapshot, Storage } from '../../src/storage/types.js';
import { collect, collectNdjson } from '../../src/testing/storage-contract.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * A store directory written (and closed cleanly) by the file store as it was before the storage
 * restructuring (commit 6aa24b5): directory.json, commit.log, once.log, the users, memberships
 * and jobs logs, resource logs with their index files, and an export snapshot held by a job.
 * Stores on disk must keep opening: never regenerate it with newer code.
 */
const FIXTURE = fileURLToPath(new URL('./fixtures/old-format-store/', import.meta.url));

const dirs: string[] = [];
const open: Storage[] = [];

/** A copy of the fixture (opening changes a store), with or without its index files. */
function copyFixture(withIndexes: boolean): string {
  const dir = tempDir('fpk-old-format-');
  dirs.push(dir);
  fs.cpSync(FIXTURE, dir, { recursive: true });
  if (!withIndexes) {
    for (const project of fs.readdirSync(path.join(dir, 'projects'))) {
      const resources = path.join(dir, 'projects', project, 'resources');
      for (const name of fs.readdirSync(resources)) {
        if (name.endsWith('.idx')) fs.rmSync(path.join(resources, name));
      }
    }
  }
  return dir;
}

async function openStore(dir: string): Promise<Storage> {
  const storage = await fileStorage({ dir, durability: 'write' });
  open.push(storage);
  return storage;
}

afterEach(async () => {
  for (const storage of open.splice(0)) await storage.close();
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

async function expectFixtureContent(storage: Storage): Promise<void> {
  const projects = await storage.listProjects();
  expect(projects.map((p) => [p.id, p.version, p.description])).toEqual([
    ['p1', 2, 'first project'],
    ['p2', 1, undefined],
  ]);
  const alice = await storage.readUser('p1', 'u-alice');
  expect(alice).toMatchObject({ userName: 'Alice', externalId: 'e-1', active: false, version: 2 });
  expect((await storage.findUsers('p1', { userName: 'ALICE' })).map((u) => u.id)).toEqual(['u-alice']);
  expect((await storage.findUsers('p1', { externalId: 'e-1' })).map((u) => u.id)).toEqual(['u-alice']);
  expect((await storage.listUsers('p1')).map((u) => u.id)).toEqual(['u-alice', 'u-carol']);
  await expect(storage.readUser('p1', 'u-bob')).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });
  expect((await storage.listMemberships('p1')).map((m) => m.id)).toEqual(['m1']);
  expect(await storage.readClient('c1')).toMatchObject({ name: 'renamed', projectId: 'p1' });
  expect((await storage.listSigningKeys()).map((k) => k.kid)).toEqual(['k1']);

  const pat1 = await storage.readResource('p1', 'Patient', 'pat1');
  expect(pat1).toMatchObject({ active: true, meta: { versionId: '2' } });
  const o1 = await storage.readResource('p1', 'Observation', 'o1');
  expect(o1).toMatchObject({ status: 'final', meta: { versionId: '2' } });
  for (const id of ['o2', 'o3']) {
    await expect(storage.readResource('p1', 'Observation', id)).rejects.toMatchObject({ deleted: true });
  }
  const byIdentifier = await storage.searchResources('p1', 'Patient', {
    search: typeSearch('Patient', [identifierFilter([{ system: 'urn:mrn', value: '111' }])]),
  });
  expect(byIdentifier.resources.map((r) => r.id)).toEqual(['pat1']);
  const byValue = await storage.searchResources('p1', 'Observation', {
    search: typeSearch('Observation', [identifierFilter([{ value: 'obs-1' }])]),
  });
  expect(byValue.resources.map((r) => r.id)).toEqual(['o1']);
  const compartment = await storage.searchResources('p1', 'Observation', {
    search: compartmentSearch('Observation', ['pat1']),
  });
  expect(compartment.resources.map((r) => r.id)).toEqual(['o1']);
  expect((await storage.searchResources('p2', 'Patient')).resources.map((r) => r.id)).toEqual(['other']);

  const job = await storage.readExportJob('p1', 'job1');
  expect(job).toMatchObject({ status: 'completed', version: 2 });
  await expect(storage.readExportJob('p1', 'job2')).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });

  // The snapshot the job holds still reads the state at its kick-off.
  const snapshot = job.snapshot as ExportSnapshot;
  const observations = await collectNdjson(
    storage.exportReader.readResources('p1', snapshot, { resourceType: 'Observation' }),
  );
  expect(observations.map((r) => r.id).sort()).toEqual(['o1', 'o3']);
  const patients = await collectNdjson(
    storage.exportReader.readResources('p1', snapshot, { resourceType: 'Patient' }),
  );
  expect(patients.map((r) => [r.id, r.meta?.versionId])).toEqual([
    ['pat1', '1'],
    ['pat2', '1'],
  ]);
  const inCompartment = await collectNdjson(
    storage.exportReader.readResources('p1', snapshot, { resourceType: 'Observation', patientIds: ['pat1'] }),
  );
  expect(inCompartment.map((r) => r.id).sort()).toEqual(['o1', 'o3']);
  const deleted = await collect(
    storage.exportReader.readDeleted('p1', snapshot, { resourceType: 'Observation' }),
  );
  expect(deleted.map((t) => t.id)).toEqual(['o2']);
}

describe('a file store written by an older version', () => {
  for (const withIndexes of [true, false]) {
    it(`opens, recovers and keeps working (${withIndexes ? 'with' : 'without'} index files)`, async () => {
      const dir = copyFixture(withIndexes);
      let storage = await openStore(dir);
      await expectFixtureContent(storage);

      // One-time values: the live one is still recorded, the expired one is free again.
      expect(await storage.useOnce('jti-live', Date.UTC(2100, 0, 1))).toBe(false);
      expect(await storage.useOnce('jti-expired', Date.UTC(2100, 0, 1))).toBe(true);
      // New writes go to the same logs, in the same encoding.
      await storage.createUser('p1', {
        projectId: 'p1',
        userName: 'bob',
        userType: 'Practitioner',
        profileId: 'pr-bob',
        active: true,
        data: {},
      });
      await storage.updateResource('p1', { resourceType: 'Observation', id: 'o3', status: 'amended' });
      await storage.close();
      const onceLog = fs.readFileSync(path.join(dir, 'once.log'), 'utf8').trim().split('\n');
      expect(onceLog.at(-1)).toMatch(/ U \{"k":"jti-expired","e":4102444800000\}$/);

      storage = await openStore(dir);
      expect((await storage.listUsers('p1')).map((u) => u.userName)).toEqual(['Alice', 'carol', 'bob']);
      expect((await storage.listMemberships('p1')).map((m) => m.id)).toEqual(['m1']);
      expect(await storage.readResource('p1', 'Patient', 'pat1')).toMatchObject({ meta: { versionId: '2' } });
      const job = await storage.readExportJob('p1', 'job1');
      const observations = await collectNdjson(
        storage.exportReader.readResources('p1', job.snapshot as ExportSnapshot, {
          resourceType: 'Observation',
        }),
      );
      expect(observations.map((r) => r.id).sort()).toEqual(['o1', 'o3']);
      expect((await storage.findUsers('p1', { userName: 'bob' })).map((u) => u.profileId)).toEqual([
        'pr-bob',
      ]);
      expect(await storage.readResource('p1', 'Observation', 'o3')).toMatchObject({
        status: 'amended',
        meta: { versionId: '3' },
      });
      expect(await storage.useOnce('jti-expired', Date.UTC(2100, 0, 1))).toBe(false);
    });
  }
});
