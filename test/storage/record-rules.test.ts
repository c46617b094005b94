import { describe, expect, it } from 'vitest';
import {
  checkId,
  checkIfVersion,
  checkResourceType,
  checkResourceWrite,
  finishUserUpdate,
  mergeUserChanges,
  newClientRecord,
  newExportJobRecord,
  newRecordId,
  newUserRecord,
  nextVersionId,
  updatedClientRecord,
  updatedExportJobRecord,
  updatedProjectRecord,
  writtenResourceKey,
} from '../../src/storage/record-rules.js';
import type { ExportJobRecord, NewUser } from '../../src/storage/types.js';

const NOW = '2026-01-02T00:00:00.000Z';
const user: NewUser = {
  projectId: 'ignored',
  userName: 'alice',
  userType: 'Patient',
  profileId: 'pat-1',
  active: true,
  data: {},
};

function code(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return (error as { code?: string }).code;
  }
  return undefined;
}

describe('record rules', () => {
  it('checks ids, resource types and userNames', () => {
    expect(code(() => checkId('', 'user'))).toBe('ERR_STORAGE_INVALID');
    expect(code(() => checkId(7, 'user'))).toBe('ERR_STORAGE_INVALID');
    expect(code(() => checkId('a\u0000b', 'user'))).toBeUndefined();
    expect(code(() => checkResourceType('patient'))).toBe('ERR_STORAGE_INVALID');
    expect(code(() => checkResourceType('Patient'))).toBeUndefined();
    expect(code(() => mergeUserChanges(newUserRecord('p', 'u', user, NOW), { userName: '' }))).toBe(
      'ERR_STORAGE_INVALID',
    );
    expect(newRecordId('given')).toBe('given');
    expect(newRecordId(undefined)).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('builds users: the key wins, an absent externalId is left out, updates bump the version', () => {
    const created = newUserRecord('p1', 'u1', { ...user, externalId: undefined }, NOW);
    expect(created).toEqual({
      ...user,
      projectId: 'p1',
      id: 'u1',
      createdAt: NOW,
      updatedAt: NOW,
      version: 1,
    });
    expect(created).not.toHaveProperty('externalId');
    const merged = mergeUserChanges(
      { ...created, externalId: 'e' },
      { externalId: undefined, active: false },
    );
    const updated = finishUserUpdate(merged, 'p1', 'u1', created.version, 'later');
    expect(updated).toMatchObject({ active: false, updatedAt: 'later', version: 2, createdAt: NOW });
    expect(updated).not.toHaveProperty('externalId');
  });

  it('checks ifVersion and bumps versions of projects and export jobs', () => {
    expect(code(() => checkIfVersion('User', 'u1', 2, 1))).toBe('ERR_STORAGE_PRECONDITION_FAILED');
    expect(code(() => checkIfVersion('User', 'u1', 2, 2))).toBeUndefined();
    expect(code(() => checkIfVersion('User', 'u1', 2, undefined))).toBeUndefined();
    const project = { id: 'p1', name: 'a', strictMode: false, createdAt: NOW, updatedAt: NOW, version: 3 };
    expect(updatedProjectRecord(project, 'p1', { name: 'b' }, 'later')).toMatchObject({
      name: 'b',
      version: 4,
    });
    const job = newExportJobRecord(
      {
        id: 'j',
        projectId: 'p1',
        ownerId: 'o',
        status: 'in-progress',
        request: 'r',
        transactionTime: NOW,
        params: {},
      },
      NOW,
    );
    expect(job.version).toBe(1);
    const next: ExportJobRecord = updatedExportJobRecord(job, 'p1', 'j', { status: 'completed' }, 'later');
    expect(next).toMatchObject({ status: 'completed', version: 2, updatedAt: 'later', createdAt: NOW });
  });

  it('removes client fields changed to undefined and keeps the key', () => {
    const client = newClientRecord(
      { id: 'c', projectId: 'p', name: 'n', scope: 's', admin: false, superAdmin: false, jwksUri: 'x' },
      NOW,
    );
    expect(client.revoked).toBe(false);
    const updated = updatedClientRecord(client, { jwksUri: undefined, name: 'm' }, 'later');
    expect(updated).toMatchObject({ id: 'c', projectId: 'p', name: 'm', createdAt: NOW, updatedAt: 'later' });
    expect(updated).not.toHaveProperty('jwksUri');
  });

  it('checks resource writes and numbers versions', () => {
    expect(writtenResourceKey({ op: 'create', resource: { resourceType: 'Patient' } }).id).toMatch(
      /^[0-9a-f-]{36}$/,
    );
    expect(
      code(() => writtenResourceKey({ op: 'update', resource: { resourceType: 'Patient', id: '' } })),
    ).toBe('ERR_STORAGE_INVALID');
    expect(code(() => checkResourceWrite('create', 'Patient', 'a', undefined, '1'))).toBe(
      'ERR_STORAGE_CONFLICT',
    );
    expect(code(() => checkResourceWrite('update', 'Patient', 'a', '1', '2'))).toBe(
      'ERR_STORAGE_PRECONDITION_FAILED',
    );
    expect(code(() => checkResourceWrite('delete', 'Patient', 'a', '1', undefined))).toBe(
      'ERR_STORAGE_PRECONDITION_FAILED',
    );
    expect(code(() => checkResourceWrite('update', 'Patient', 'a', undefined, '2'))).toBeUndefined();
    expect([undefined, '1', '41', 'x'].map(nextVersionId)).toEqual(['1', '2', '42', '1']);
  });
});
