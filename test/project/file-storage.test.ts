import express from 'express';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { projectRouter } from '../../src/project/router.js';
import { NotFoundError } from '../../src/storage/errors.js';
import { fileStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { failUserCreation } from './fail-user-creation.js';
import { tempDir } from '../helpers/temp-dir.js';

const BASE = '/api/fhir/R4';
const SUPER = testToken({ projectId: null, kind: 'super-admin', id: 'root', superAdmin: true });
const INIT = JSON.stringify({
  resourceType: 'Parameters',
  parameter: [
    { name: 'name', valueString: 'Acme' },
    { name: 'ownerEmail', valueString: 'ada@acme.example' },
  ],
});

const open: Storage[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

async function store(dir: string): Promise<Storage> {
  const storage = await fileStorage({ dir });
  open.push(storage);
  return storage;
}

function app(storage: Storage) {
  const a = express();
  a.use(BASE, projectRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return a;
}

describe('Project/$init on the file store', () => {
  it('creates a project that survives a restart', async () => {
    const dir = tempDir('project-file-');
    const first = await store(dir);
    const res = await request(app(first))
      .post(`${BASE}/Project/$init`)
      .set('Authorization', SUPER)
      .type('application/fhir+json')
      .send(INIT);
    expect(res.status).toBe(201);
    const id = res.body.id as string;
    await first.close();
    open.splice(open.indexOf(first), 1);

    const second = await store(dir);
    const project = await second.readProject(id);
    const [user] = await second.listUsers(id);
    expect(project.ownerUserId).toBe(user!.id);
    expect(user!.userName).toBe('ada@acme.example');
    expect((await second.readResource(id, 'Practitioner', user!.profileId)).telecom).toBeDefined();
    expect(await second.listMemberships(id)).toEqual([
      expect.objectContaining({ userId: user!.id, admin: true }),
    ]);
  });

  it('leaves nothing behind when a step after the project fails, even after a restart', async () => {
    const dir = tempDir('project-file-');
    const base = await store(dir);
    const { createdProjects } = failUserCreation(base);
    const res = await request(app(base))
      .post(`${BASE}/Project/$init`)
      .set('Authorization', SUPER)
      .type('application/fhir+json')
      .send(INIT);
    expect(res.status).toBe(500);
    expect(res.body.resourceType).toBe('OperationOutcome');
    expect(createdProjects).toHaveLength(1);
    const id = createdProjects[0]!;
    await base.close();
    open.splice(open.indexOf(base), 1);

    const reopened = await store(dir);
    expect(await reopened.listProjects()).toEqual([]);
    await expect(reopened.readProject(id)).rejects.toBeInstanceOf(NotFoundError);
    expect(await reopened.listUsers(id)).toEqual([]);
    expect(await reopened.listMemberships(id)).toEqual([]);
    expect((await reopened.searchResources(id, 'Practitioner')).total).toBe(0);
  });
});
