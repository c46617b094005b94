import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { requirePrincipal, getPrincipal } from '../../src/http/authenticate.js';
import { fhirErrorHandler } from '../../src/http/error-rendering.js';
import { memoryStorage } from '../../src/stores.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

describe('requirePrincipal', () => {
  it('lets active users act, stops inactive (403) and deleted (401) users', async () => {
    const storage = memoryStorage();
    const project = await storage.createProject({ id: 'p1', name: 'P', strictMode: false });
    const user = await storage.createUser(project.id, {
      projectId: project.id,
      userName: 'jane',
      userType: 'Patient',
      profileId: 'pat-1',
      active: true,
      data: {},
    });
    const app = express();
    const router = express.Router();
    router.use(requirePrincipal(testAuthenticate, storage));
    router.get('/who', (_req, res) => {
      res.json({ id: getPrincipal(res).id });
    });
    router.use(fhirErrorHandler(() => undefined));
    app.use('/api', router);
    const token = testToken({ projectId: project.id, kind: 'user', id: user.id });

    expect((await request(app).get('/api/who')).status).toBe(401);
    expect((await request(app).get('/api/who').set('Authorization', token)).body).toEqual({ id: user.id });

    await storage.updateUser(project.id, user.id, { active: false });
    const inactive = await request(app).get('/api/who').set('Authorization', token);
    expect(inactive.status).toBe(403);
    expect(inactive.body.resourceType).toBe('OperationOutcome');

    await storage.deleteUser(project.id, user.id);
    const gone = await request(app).get('/api/who').set('Authorization', token);
    expect(gone.status).toBe(401);
    expect(gone.headers['www-authenticate']).toMatch(/^Bearer/);

    // Clients are not users: no user lookup.
    const client = testToken({ projectId: project.id, kind: 'client', id: 'c1' });
    expect((await request(app).get('/api/who').set('Authorization', client)).status).toBe(200);
    await storage.close();
  });
});
