import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { createHostApp, hostToken } from '../../examples/custom-auth/app.js';
import { memoryStorage } from '../../src/stores.js';
import { tempDir } from '../helpers/temp-dir.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

describe('example: a host with its own authentication, platform under /api', () => {
  it('creates a project, provisions a user by SCIM, and lets that user act; unknown users get 401', async () => {
    const dir = tempDir('fpk-host-');
    const storage = memoryStorage();
    const secret = randomBytes(32);
    const { app, platform } = createHostApp({ storage, exportDir: path.join(dir, 'exports'), secret });
    closers.push(async () => {
      await platform.close();
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    });
    const bearer = async (claims: Parameters<typeof hostToken>[1]) =>
      `Bearer ${await hostToken(secret, claims)}`;

    const init = await request(app)
      .post('/api/fhir/R4/Project/$init')
      .set('Authorization', await bearer({ sub: 'ops', role: 'operator' }))
      .type('application/fhir+json')
      .send(
        JSON.stringify({
          resourceType: 'Parameters',
          parameter: [
            { name: 'name', valueString: 'Clinic' },
            { name: 'ownerEmail', valueString: 'owner@clinic.example' },
          ],
        }),
      );
    expect(init.status).toBe(201);
    const tenant = init.body.id as string;

    const provisioned = await request(app)
      .post('/api/scim/v2/Users')
      .set('Authorization', await bearer({ sub: 'scim-sync', role: 'provisioner', tenant }))
      .type('application/scim+json')
      .send(JSON.stringify({ userName: 'alice@clinic.example', userType: 'Patient' }));
    expect(provisioned.status).toBe(201);
    expect(provisioned.body.meta.location).toMatch(/^https:\/\/api\.host\.example\/api\/scim\/v2\/Users\//);
    // userName answers the profile id (the contract's default); the login stays stored for lookups.
    const profile = `Patient/${provisioned.body.userName as string}`;

    const alice = await bearer({
      sub: 'ALICE@clinic.example',
      role: 'user',
      tenant,
      scope: 'user/Patient.rs',
    });
    const read = await request(app).get(`/api/fhir/R4/${profile}`).set('Authorization', alice);
    expect(read.status).toBe(200);
    expect(read.body.resourceType).toBe('Patient');
    // Her scope allows no writes.
    const write = await request(app)
      .post('/api/fhir/R4/Observation')
      .set('Authorization', alice)
      .type('application/fhir+json')
      .send(JSON.stringify({ resourceType: 'Observation', status: 'final', code: { text: 'x' } }));
    expect(write.status).toBe(403);

    const stranger = await bearer({
      sub: 'mallory@clinic.example',
      role: 'user',
      tenant,
      scope: 'user/*.rs',
    });
    expect((await request(app).get('/api/fhir/R4/Patient').set('Authorization', stranger)).status).toBe(401);
    const forged = `Bearer ${await hostToken(randomBytes(32), { sub: 'ops', role: 'operator' })}`;
    expect((await request(app).get('/api/fhir/R4/Patient').set('Authorization', forged)).status).toBe(401);
    expect((await request(app).get('/')).status).toBe(200);
  });
});
