import fs from 'node:fs';
import path from 'node:path';
import express from 'express';
import request from 'supertest';
import { expect } from 'vitest';
import { fhirPlatform, type FhirPlatform, type FhirPlatformOptions } from '../../src/platform.js';
import { ensureSuperAdminClient } from '../../src/auth/client/super-admin.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { tempDir } from './temp-dir.js';

export const FHIR_JSON = 'application/fhir+json';
export const SCIM_JSON = 'application/scim+json';
export const ROOT_ID = 'root';
export const ROOT_SECRET = 'root-secret-0123456789';

/** A FHIR `Parameters` body from name/value pairs. */
export function parameters(values: Record<string, string | boolean>) {
  return {
    resourceType: 'Parameters' as const,
    parameter: Object.entries(values).map(([name, value]) =>
      typeof value === 'boolean' ? { name, valueBoolean: value } : { name, valueString: value },
    ),
  };
}

/**
 * A whole platform (on a memory store unless given one), with the super admin `root` and helpers
 * that use real tokens.
 */
export interface PlatformTestApp {
  app: express.Express;
  storage: Storage;
  platform: FhirPlatform;
  /** The raw token endpoint answer (client_secret_basic; `scope` omitted when undefined). */
  tokenResponse(clientId: string, secret: string, scope?: string): Promise<request.Response>;
  /** `Bearer <token>` for a successful token request. */
  bearer(clientId: string, secret: string, scope?: string): Promise<string>;
  /** Runs `$init` as the super admin (full token); the new project's id. */
  initProject(name: string): Promise<string>;
  /** Registers a client in `projectId` as the super admin; its id and secret. */
  newClient(
    projectId: string,
    values: Record<string, string | boolean>,
  ): Promise<{ id: string; secret: string }>;
  /** `POST /scim/v2/Users` of a user named `userName` (a Practitioner unless `userType` says). */
  scimUser(auth: string, userName: string, userType?: string): Promise<request.Response>;
  close(): Promise<void>;
}

export async function createPlatformApp(
  extra: Partial<FhirPlatformOptions> = {},
  storage: Storage = memoryStorage(),
): Promise<PlatformTestApp> {
  const dir = tempDir('fpk-admin-scope-');
  await ensureSuperAdminClient(storage, { clientId: ROOT_ID, clientSecret: ROOT_SECRET });
  const platform = fhirPlatform({
    storage,
    exportDir: path.join(dir, 'exports'),
    scimBasicAuth: true,
    baseUrl: 'http://fhir.test',
    token: { rateLimit: false },
    onError: () => undefined,
    ...extra,
  });
  const app = express();
  app.use(platform.router);

  const tokenResponse = (clientId: string, secret: string, scope?: string) =>
    request(app)
      .post('/oauth2/token')
      .auth(clientId, secret)
      .type('form')
      .send({ grant_type: 'client_credentials', ...(scope === undefined ? {} : { scope }) });

  const bearer = async (clientId: string, secret: string, scope?: string) => {
    const res = await tokenResponse(clientId, secret, scope);
    expect(res.status).toBe(200);
    return `Bearer ${res.body.access_token as string}`;
  };

  return {
    app,
    storage,
    platform,
    tokenResponse,
    bearer,
    async initProject(name) {
      const res = await request(app)
        .post('/fhir/R4/Project/$init')
        .set('Authorization', await bearer(ROOT_ID, ROOT_SECRET))
        .type(FHIR_JSON)
        .send(JSON.stringify(parameters({ name })));
      expect(res.status).toBe(201);
      return res.body.id as string;
    },
    async newClient(projectId, values) {
      const res = await request(app)
        .post(`/fhir/R4/Project/${projectId}/$new-client`)
        .set('Authorization', await bearer(ROOT_ID, ROOT_SECRET))
        .type(FHIR_JSON)
        .send(JSON.stringify(parameters(values)));
      expect(res.status).toBe(201);
      return { id: res.body.id as string, secret: res.body.secret as string };
    },
    scimUser(auth, userName, userType = 'Practitioner') {
      return request(app)
        .post('/scim/v2/Users')
        .set('Authorization', auth)
        .type(SCIM_JSON)
        .send({ schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'], userType, userName });
    },
    async close() {
      await platform.close();
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
