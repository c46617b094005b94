import express from 'express';
import request from 'supertest';
import { expect } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { scimRouter } from '../../src/scim/router.js';
import type { StorageOperations, Storage, StoredResource } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

export const SCIM_BASE = '/api/scim/v2';
export const FHIR_BASE = '/api/fhir/R4';
export const GROUP_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:Group';
export const PATCH_OP = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
export const SCIM_TAG = { system: 'urn:fhir-platform-kit:tag', code: 'scim-managed' };

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** A PatchOp body of `operations`. */
export const patchOp = (...operations: Record<string, unknown>[]) => ({
  schemas: [PATCH_OP],
  Operations: operations,
});

/** One request to a router: method, path under its mount point, JSON body, token. */
export type Call = (method: Method, path: string, body?: unknown, auth?: string) => request.Test;

export interface GroupApp {
  app: express.Express;
  storage: Storage;
  /** Admin tokens of `proj-a` and `proj-b`. */
  admin: string;
  adminB: string;
  scim: Call;
  fhir: Call;
  user(userName: string, extra?: Record<string, unknown>): Promise<{ id: string; profile: string }>;
  group(displayName: string, members?: string[], extra?: Record<string, unknown>): Promise<request.Response>;
  fhirGroup(id: string, projectId?: string): Promise<StoredResource>;
}

/**
 * The SCIM and FHIR routers on one store (projects `proj-a` and `proj-b`), at realistic non-root
 * paths, with an admin token of `proj-a` good for both, and helpers.
 */
export async function groupApp(storage: Storage): Promise<GroupApp> {
  for (const id of ['proj-a', 'proj-b']) await storage.createProject({ id, name: id, strictMode: false });
  const app = express();
  const common = { storage, authenticate: testAuthenticate, onError: () => undefined };
  app.use(SCIM_BASE, scimRouter(common));
  app.use(FHIR_BASE, fhirRouter(common));
  const admin = testToken({ projectId: 'proj-a', admin: true, scopes: ['system/*.*'] });
  const adminB = testToken({ projectId: 'proj-b', admin: true, scopes: ['system/*.*'] });

  const call =
    (base: string, type: string): Call =>
    (method, path, body, auth = admin) => {
      const req = request(app)[method](`${base}${path}`).set('Authorization', auth);
      return body === undefined ? req : req.set('Content-Type', type).send(JSON.stringify(body));
    };
  const scim = call(SCIM_BASE, 'application/scim+json');
  const fhir = call(FHIR_BASE, 'application/fhir+json');

  /** Creates a SCIM user; its id and profile reference. */
  const user = async (userName: string, extra: Record<string, unknown> = {}) => {
    const res = await scim('post', '/Users', {
      schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
      userName,
      userType: 'Practitioner',
      name: { givenName: userName, familyName: 'Tester' },
      ...extra,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const record = await storage.readUser('proj-a', res.body.id as string);
    return { id: record.id, profile: `${record.userType}/${record.profileId}` };
  };

  /** Creates a SCIM group; the answer. */
  const group = async (displayName: string, members: string[] = [], extra: Record<string, unknown> = {}) => {
    const res = await scim('post', '/Groups', {
      schemas: [GROUP_SCHEMA],
      displayName,
      members: members.map((value) => ({ value })),
      ...extra,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res;
  };

  /** The FHIR Group of a SCIM group, as the store holds it. */
  const fhirGroup = (id: string, projectId = 'proj-a') => storage.readResource(projectId, 'Group', id);

  return { app, storage, admin, adminB, scim, fhir, user, group, fhirGroup };
}

/** The versions of a resource the store keeps. */
export async function versionsOf(storage: Storage, type: string, id: string): Promise<number> {
  const page = await storage.readHistory('proj-a', { type, id, count: 1000 });
  return page.entries.length;
}

/** The SCIM user ids of a FHIR Group's members, in order, with their entity and `inactive`. */
export function membersOf(group: StoredResource): { user: string; entity: string; inactive?: true }[] {
  const members = (group.member ?? []) as {
    entity: { reference: string };
    inactive?: boolean;
    extension?: { url: string; valueString: string }[];
  }[];
  return members.map((m) => ({
    user: m.extension?.find((e) => e.url === 'urn:fhir-platform-kit:scim-member')?.valueString ?? '',
    entity: m.entity.reference,
    ...(m.inactive ? { inactive: true as const } : {}),
  }));
}

/**
 * `storage` with a count of the FHIR resource writes made through it (creates, updates, deletes,
 * each write of a batch, in and out of transactions).
 */
export function countingWrites(storage: Storage): { storage: Storage; writes: () => number } {
  let writes = 0;
  const count = <T extends StorageOperations>(ops: T): T =>
    new Proxy(ops, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property);
        if (typeof value !== 'function') return value;
        const fn = (value as (...args: unknown[]) => unknown).bind(target);
        if (property === 'createResource' || property === 'updateResource' || property === 'deleteResource')
          return (...args: unknown[]) => {
            writes++;
            return fn(...args);
          };
        if (property === 'writeResources')
          return (projectId: string, batch: unknown[]) => {
            writes += batch.length;
            return fn(projectId, batch);
          };
        if (property === 'transaction')
          return (run: (tx: StorageOperations) => Promise<unknown>) =>
            fn((tx: StorageOperations) => run(count(tx)));
        return fn;
      },
    });
  return { storage: count(storage), writes: () => writes };
}
