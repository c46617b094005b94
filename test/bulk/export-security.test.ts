import { describe, expect, it } from 'vitest';
import request from 'supertest';
import { gunzipSync } from 'node:zlib';
import { BASE, bulkTestApp, exportManifest, kickoff, pathOf, poll, token } from '../helpers/bulk-export.js';

function rawGet(app: Parameters<typeof request>[0], path: string, auth: string) {
  return request(app)
    .get(path)
    .set('Authorization', auth)
    .buffer(true)
    .parse((r, cb) => {
      const chunks: Buffer[] = [];
      r.on('data', (c: Buffer) => chunks.push(Buffer.from(c)));
      r.on('end', () => cb(null, Buffer.concat(chunks)));
    });
}

describe('bulk export authorization', () => {
  it('401 without a token, 403 outside a project', async () => {
    const { app } = await bulkTestApp();
    for (const path of [
      '/$export',
      '/Patient/$export',
      '/Group/g1/$export',
      '/$export-status/x',
      '/$export-file/x/y',
    ]) {
      const res = await request(app).get(`${BASE}${path}`);
      expect(res.status).toBe(401);
      expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
      expect(res.body.resourceType).toBe('OperationOutcome');
    }
    const admin = await request(app)
      .get(`${BASE}/$export`)
      .set('Authorization', token(null, { superAdmin: true }));
    expect(admin.status).toBe(403);
  });

  it('exports only the types the token covers; 403 for a named type it does not', async () => {
    const { app } = await bulkTestApp();
    const narrow = token('proj-a', { scopes: ['system/Patient.read', 'system/Observation.rs'] });
    const m = await exportManifest(app, narrow, '/$export');
    expect(m.output.map((o) => o.type).sort()).toEqual(['Observation', 'Patient']);
    const forbidden = await request(app).get(`${BASE}/$export?_type=Condition`).set('Authorization', narrow);
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.issue[0].code).toBe('forbidden');
    const none = await request(app)
      .get(`${BASE}/$export`)
      .set('Authorization', token('proj-a', { scopes: ['openid'] }));
    expect(none.status).toBe(403);
    // Lenient handling drops the uncovered type instead.
    const lenient = await exportManifest(app, narrow, '/$export?_type=Condition,Patient', {
      prefer: 'respond-async, handling=lenient',
    });
    expect(lenient.output.map((o) => o.type)).toEqual(['Patient']);
  });

  it('status and files are invisible to other projects and principals', async () => {
    const { app, auth } = await bulkTestApp();
    const statusPath = await kickoff(app, auth, '/$export?_type=Patient');
    const done = await poll(app, auth, statusPath);
    expect(done.status).toBe(200);
    const fileUrl = JSON.parse(done.text).output[0].url as string;
    const otherProject = token('proj-b');
    const otherClient = token('proj-a', { id: 'another-client' });
    expect((await request(app).get(statusPath).set('Authorization', otherProject)).status).toBe(404);
    expect((await request(app).get(statusPath).set('Authorization', otherClient)).status).toBe(404);
    expect((await request(app).delete(statusPath).set('Authorization', otherProject)).status).toBe(404);
    expect((await request(app).delete(statusPath).set('Authorization', otherClient)).status).toBe(404);
    expect((await request(app).get(pathOf(fileUrl)).set('Authorization', otherProject)).status).toBe(404);
    // Same project, scope covering the file's type: allowed; not covering it: 403.
    expect((await request(app).get(pathOf(fileUrl)).set('Authorization', otherClient)).status).toBe(200);
    const noPatient = token('proj-a', { id: 'another-client', scopes: ['system/Observation.read'] });
    expect((await request(app).get(pathOf(fileUrl)).set('Authorization', noPatient)).status).toBe(403);
    expect((await request(app).get(pathOf(fileUrl))).status).toBe(401);
  });

  it('no path outside the export directory is ever served', async () => {
    const { app, auth } = await bulkTestApp();
    const m = await exportManifest(app, auth, '/$export?_type=Patient');
    const fileUrl = pathOf(m.output[0]!.url);
    const jobId = fileUrl.split('/')[4]!;
    const attempts = [
      `${BASE}/$export-file/${jobId}/..%2F..%2F..%2Fetc%2Fpasswd`,
      `${BASE}/$export-file/${jobId}/%2Fetc%2Fpasswd`,
      `${BASE}/$export-file/${jobId}/..`,
      `${BASE}/$export-file/${jobId}/%2E%2E`,
      `${BASE}/$export-file/..%2F${jobId}/Patient-1.ndjson`,
      `${BASE}/$export-file/..%2F..%2Fetc/passwd`,
      `${BASE}/$export-file/${jobId}/.Patient-1.ndjson.part`,
      `${BASE}/$export-file/${jobId}/Patient-1.ndjson%00.txt`,
      `${BASE}/$export-file/${jobId}/Patient-9.ndjson`,
      `${BASE}/$export-file/${jobId}/%E0%A4%A`,
      `${BASE}/$export-file/00000000-0000-0000-0000-000000000000/Patient-1.ndjson`,
      `${BASE}/$export-file/${jobId}/..%5C..%5Cetc%5Cpasswd`,
    ];
    for (const path of attempts) {
      const res = await request(app).get(path).set('Authorization', auth);
      expect([404, 418], path).toContain(res.status);
      expect(res.text).not.toMatch(/root:/);
    }
  });
});

describe('downloads', () => {
  it('gzip when accepted, identity otherwise, Range for resuming', async () => {
    const { app, auth } = await bulkTestApp();
    const m = await exportManifest(app, auth, '/$export?_type=Patient');
    const path = pathOf(m.output[0]!.url);
    const plain = await rawGet(app, path, auth).set('Accept-Encoding', 'identity');
    expect(plain.status).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.headers['accept-ranges']).toBe('bytes');
    const body = plain.body as Buffer;
    const gz = await rawGet(app, path, auth)
      .set('Accept-Encoding', 'gzip')
      .set('Accept-Encoding', 'gzip')
      .buffer(true);
    expect(gz.status).toBe(200);
    expect(gz.headers['content-encoding']).toBe('gzip');
    expect(gz.headers['content-type']).toMatch(/^application\/fhir\+ndjson/);
    // supertest may have decompressed already; either way the content is the same file.
    const gzBody = gz.body as Buffer;
    const text = gzBody[0] === 0x1f && gzBody[1] === 0x8b ? gunzipSync(gzBody) : gzBody;
    expect(text.equals(body)).toBe(true);
    const part = await rawGet(app, path, auth).set('Range', 'bytes=10-19').set('Accept-Encoding', 'gzip');
    expect(part.status).toBe(206);
    expect(part.headers['content-encoding']).toBeUndefined();
    expect(part.headers['content-range']).toBe(`bytes 10-19/${body.length}`);
    expect((part.body as Buffer).equals(body.subarray(10, 20))).toBe(true);
    const lines = text.toString('utf8').split('\n').filter(Boolean);
    expect(lines).toHaveLength(m.output[0]!.count);
  });

  it('resumes a cut download: a strong ETag per file and coding, Range from the cut, If-Range', async () => {
    const { app, auth } = await bulkTestApp();
    const m = await exportManifest(app, auth, '/$export?_type=Patient');
    const path = pathOf(m.output[0]!.url);
    const whole = await rawGet(app, path, auth).set('Accept-Encoding', 'identity');
    const body = whole.body as Buffer;
    const tag = whole.headers.etag as string;
    expect(tag).toMatch(/^"[A-Za-z0-9_-]+"$/); // strong: no W/
    const gz = await rawGet(app, path, auth).set('Accept-Encoding', 'gzip').buffer(true);
    expect(gz.headers.etag).toBeDefined();
    expect(gz.headers.etag).not.toBe(tag);
    expect((await rawGet(app, path, auth).set('Accept-Encoding', 'identity')).headers.etag).toBe(tag);
    // As `curl -C -` or a client resuming: the bytes received, then the rest from there.
    const cut = 37;
    const rest = await rawGet(app, path, auth).set('Range', `bytes=${cut}-`).set('If-Range', tag);
    expect(rest.status).toBe(206);
    expect(rest.headers['content-range']).toBe(`bytes ${cut}-${body.length - 1}/${body.length}`);
    expect(rest.headers.etag).toBe(tag);
    expect(Buffer.concat([body.subarray(0, cut), rest.body as Buffer]).equals(body)).toBe(true);
    // A validator that is not the file's own (another tag, the gzip one, a weak one, a date): the
    // whole file, as RFC 9110 §13.1.5 says, never a range of something else.
    for (const other of ['"other"', gz.headers.etag as string, `W/${tag}`, new Date().toUTCString()]) {
      const res = await rawGet(app, path, auth)
        .set('Accept-Encoding', 'identity')
        .set('Range', `bytes=${cut}-`)
        .set('If-Range', other);
      expect(res.status, other).toBe(200);
      expect((res.body as Buffer).equals(body), other).toBe(true);
    }
  });

  it('status of an unknown job is 404 with an OperationOutcome', async () => {
    const { app, auth } = await bulkTestApp();
    for (const id of ['00000000-0000-0000-0000-000000000000', 'not-a-job', '..%2F..']) {
      const res = await request(app).get(`${BASE}/$export-status/${id}`).set('Authorization', auth);
      expect(res.status).toBe(404);
      expect(res.body.resourceType).toBe('OperationOutcome');
    }
  });
});
