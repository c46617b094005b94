import express from 'express';
import { scimRouter, type ScimRouterOptions } from '../../src/scim/router.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

export const MOUNT = '/api/scim/v2';
export const SCIM = 'application/scim+json';

/** An app with the SCIM router mounted at a realistic non-root path, on a fresh memory store. */
export async function createScimApp(options: Partial<ScimRouterOptions> = {}) {
  const storage: Storage = options.storage ?? memoryStorage();
  for (const id of ['proj-a', 'proj-b']) {
    await storage.createProject({ id, name: id, strictMode: false });
  }
  const app = express();
  app.use(
    MOUNT,
    scimRouter({ storage, authenticate: testAuthenticate, onError: () => undefined, ...options }),
  );
  const admin = testToken({ projectId: 'proj-a', admin: true });
  const adminB = testToken({ projectId: 'proj-b', admin: true });
  return { app, storage, admin, adminB };
}
