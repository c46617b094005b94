import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AuditContext } from '../../src/audit/options.js';
import type { AuditRecord } from '../../src/audit/events.js';
import type { FhirResource } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { smartUser, userBearer } from '../helpers/smart-users.js';

// A read of a Binary whose request asks for no FHIR format answers the Binary's own content (FHIR R4
// binary.html, "Serving Binary Resources using the RESTful API"): how a client downloads an
// Attachment whose `url` is this server's `Binary/{id}`. Through the whole platform, with real
// tokens, on every store.
const FHIR = '/fhir/R4';
const TEXT = 'hello, world\n';
/** Not UTF-8: the bytes must come back as they are. */
const PDF = Buffer.from([0x25, 0x50, 0x44, 0x46, 0x2d, 0xff, 0x00, 0xfe, 0x0a]);
const APP_SCOPE = 'user/*.* openid fhirUser';

const binary = (id: string, contentType: unknown, data?: unknown): FhirResource & { id: string } => ({
  resourceType: 'Binary',
  id,
  contentType,
  ...(data === undefined ? {} : { data }),
});

/** Reads a response body as bytes, whatever its content type. */
function bytes(res: request.Response, callback: (error: Error | null, body: Buffer) => void): void {
  const chunks: Buffer[] = [];
  res.on('data', (chunk: Buffer) => chunks.push(chunk));
  res.on('end', () => callback(null, Buffer.concat(chunks)));
}

function expect406(res: request.Response): void {
  expect(res.status, res.text).toBe(406);
  expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
  expect(res.body.resourceType).toBe('OperationOutcome');
  expect(res.body.issue[0].code).toBe('not-supported');
}

forEachStore('Binary native read', (store, open) =>
  describe(`Binary read in its own content type (${store} store)`, () => {
    let t: PlatformTestApp;
    let auth: string;
    let projectId: string;
    const seen: AuditContext[] = [];
    /** The FHIR read and refusal events recorded since the last call (recorded before the answer). */
    const take = (): AuditRecord[] =>
      seen
        .splice(0)
        .map((s) => s.record)
        .filter((r) => r.kind === 'fhir-access' || r.kind === 'refused');

    beforeAll(async () => {
      t = await createPlatformApp(
        { audit: { refusalWindowMs: 0, onAudit: (_event, context) => void seen.push(context) } },
        await open(),
      );
      projectId = await t.initProject('Documents');
      await t.storage.updateProject(projectId, { strictMode: false });
      const client = await t.newClient(projectId, { name: 'ehr', scope: 'system/*.*' });
      auth = await t.bearer(client.id, client.secret);
      for (const resource of [
        binary('note', 'text/plain; charset=utf-8', Buffer.from(TEXT).toString('base64')),
        binary('scan', 'application/pdf', PDF.toString('base64')),
      ]) {
        const put = await request(t.app)
          .put(`${FHIR}/Binary/${resource.id}`)
          .set('Authorization', auth)
          .type(FHIR_JSON)
          .send(JSON.stringify(resource));
        expect(put.status, put.text).toBe(201);
      }
      // What a lenient project may hold, written past the checks of the FHIR routes.
      await t.storage.writeResources(
        projectId,
        [
          binary('empty', 'text/plain'),
          binary('garbled', 'text/plain', '@@not base64@@'),
          binary('untyped', 'plain text', 'aGk='),
          binary('injected', 'text/plain\r\nSet-Cookie: a=b', 'aGk='),
        ].map((resource) => ({ op: 'update' as const, resource })),
      );
    });
    afterAll(async () => {
      await t.close();
    });

    /** `GET` of `path` with `token` (`null`: none). */
    const get = (path: string, accept?: string, token: string | null = auth) => {
      const test = request(t.app).get(`${FHIR}/${path}`);
      if (token !== null) test.set('Authorization', token);
      if (accept !== undefined) test.set('Accept', accept);
      return test;
    };

    it('answers the decoded data with the contentType, version headers and length', async () => {
      const json = await get('Binary/note');
      expect(json.status).toBe(200);
      const res = await get('Binary/note', 'text/plain');
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(res.text).toBe(TEXT);
      expect(res.headers['content-length']).toBe(String(Buffer.byteLength(TEXT)));
      expect(res.headers.etag).toBe('W/"1"');
      expect(res.headers['last-modified']).toBe(json.headers['last-modified']);
      expect(res.headers['x-content-type-options']).toBe('nosniff');
      expect(res.headers['content-security-policy']).toMatch(/sandbox/);
    });

    it('answers bytes that are not text as they are', async () => {
      for (const accept of [
        'application/pdf',
        'image/png, application/pdf;q=0.5',
        'application/pdf, */*;q=0',
      ]) {
        const res = await get('Binary/scan', accept).buffer(true).parse(bytes);
        expect(res.status, accept).toBe(200);
        expect(res.headers['content-type']).toBe('application/pdf');
        expect(Buffer.compare(res.body as Buffer, PDF), accept).toBe(0);
        expect(res.headers['content-length']).toBe(String(PDF.length));
      }
      // A range of the type's major type accepts it too.
      expect((await get('Binary/note', 'text/*')).text).toBe(TEXT);
    });

    it('keeps FHIR JSON for a request that accepts it, or that names a `_format`', async () => {
      for (const accept of [
        undefined,
        '*/*',
        'application/fhir+json',
        'application/json',
        'application/*',
        'text/plain, application/fhir+json;q=0.1',
        'text/html,application/xhtml+xml,*/*;q=0.8',
      ]) {
        const res = await get('Binary/note', accept);
        expect(res.status, accept).toBe(200);
        expect(res.headers['content-type'], accept).toMatch(/^application\/fhir\+json/);
        expect(res.body, accept).toMatchObject({ resourceType: 'Binary', id: 'note' });
      }
      const format = await get('Binary/note?_format=json', 'text/plain');
      expect(format.status).toBe(200);
      expect(format.body.resourceType).toBe('Binary');
      expect406(await get('Binary/note?_format=xml', 'text/plain'));
      expect406(await get('Binary/note?_format=text/plain', 'text/plain'));
    });

    it('answers 406 when Accept allows neither JSON nor the contentType', async () => {
      for (const accept of ['image/png', 'text/plain;q=0', 'text/*, text/plain;q=0', 'application/fhir+xml'])
        expect406(await get('Binary/note', accept));
      expect406(await get('Binary/scan', 'text/plain'));
    });

    it('answers 406 for a Binary it cannot serve natively: no data, data not base64, no sendable type', async () => {
      expect406(await get('Binary/empty', 'text/plain'));
      expect406(await get('Binary/garbled', 'text/plain'));
      for (const id of ['untyped', 'injected']) {
        expect406(await get(`Binary/${id}`, 'text/plain'));
        // Its FHIR JSON form is still there.
        expect((await get(`Binary/${id}`, 'application/fhir+json')).status).toBe(200);
      }
    });

    it('reads a version (vread) in its own content type', async () => {
      const path = 'Binary/versioned';
      const write = (text: string) =>
        request(t.app)
          .put(`${FHIR}/${path}`)
          .set('Authorization', auth)
          .type(FHIR_JSON)
          .send(JSON.stringify(binary('versioned', 'text/csv', Buffer.from(text).toString('base64'))));
      expect((await write('a,b\n1,2\n')).status).toBe(201);
      expect((await write('a,b\n3,4\n')).status).toBe(200);
      const first = await get(`${path}/_history/1`, 'text/csv');
      expect(first.status).toBe(200);
      expect(first.headers['content-type']).toBe('text/csv');
      expect(first.text).toBe('a,b\n1,2\n');
      expect(first.headers.etag).toBe('W/"1"');
      expect((await get(path, 'text/csv')).text).toBe('a,b\n3,4\n');
      expect406(await get(`${path}/_history/2`, 'image/png'));
      expect((await get(`${path}/_history/2`, '*/*')).body.resourceType).toBe('Binary');
      expect((await get(`${path}/_history/9`, 'text/csv')).status).toBe(404);
    });

    it('answers HEAD with the headers of the content and no body', async () => {
      const res = await request(t.app)
        .head(`${FHIR}/Binary/scan`)
        .set('Authorization', auth)
        .set('Accept', 'application/pdf');
      expect(res.status).toBe(200);
      expect(res.headers['content-type']).toBe('application/pdf');
      expect(res.headers['content-length']).toBe(String(PDF.length));
      expect(res.headers.etag).toBe('W/"1"');
      expect(res.text ?? '').toBe('');
    });

    it('answers a conditional read 304 as the JSON read does', async () => {
      const res = await get('Binary/note', 'text/plain').set('If-None-Match', 'W/"1"');
      expect(res.status).toBe(304);
      expect(res.headers.etag).toBe('W/"1"');
      expect((await get('Binary/note', 'text/plain').set('If-None-Match', 'W/"7"')).status).toBe(200);
    });

    it('refuses whoever may not read it exactly as the JSON read does', async () => {
      const narrow = await t.newClient(projectId, { name: 'patients only', scope: 'system/Patient.read' });
      const narrowAuth = await t.bearer(narrow.id, narrow.secret);
      const otherProject = await t.initProject('Elsewhere');
      const other = await t.newClient(otherProject, { name: 'other', scope: 'system/*.*' });
      const otherAuth = await t.bearer(other.id, other.secret);
      const deleted = await request(t.app)
        .put(`${FHIR}/Binary/gone`)
        .set('Authorization', auth)
        .type(FHIR_JSON)
        .send(JSON.stringify(binary('gone', 'text/plain', 'aGk=')));
      expect(deleted.status).toBe(201);
      expect((await request(t.app).delete(`${FHIR}/Binary/gone`).set('Authorization', auth)).status).toBe(
        204,
      );

      const cases: [string, string | null, number][] = [
        ['Binary/note', null, 401],
        ['Binary/note', 'Bearer not-a-token', 401],
        ['Binary/note', narrowAuth, 403],
        ['Binary/note', otherAuth, 404],
        ['Binary/nothing', auth, 404],
        ['Binary/gone', auth, 410],
        ['Binary/note/_history/1', narrowAuth, 403],
        ['Binary/note/_history/1', otherAuth, 404],
      ];
      for (const [path, token, status] of cases) {
        take();
        const json = await get(path, 'application/fhir+json', token);
        const jsonEvents = take();
        const native = await get(path, 'text/plain', token);
        const nativeEvents = take();
        expect([json.status, native.status], `${path} ${token}`).toEqual([status, status]);
        expect(native.body.resourceType).toBe('OperationOutcome');
        expect(native.body.issue[0].code).toBe(json.body.issue[0].code);
        if (status !== 410) expect(jsonEvents.map((r) => r.kind)).toContain('refused');
        // The same refusal events, but for the path.
        const sansPath = (records: AuditRecord[]) => records.map((r) => ({ ...r, path: undefined }));
        expect(sansPath(nativeEvents), `${path} ${status}`).toEqual(sansPath(jsonEvents));
      }
    });

    it('records a read as the JSON read does', async () => {
      // A Binary is in no patient's compartment: neither read is a `fhir-access` event (docs/audit.md).
      take();
      expect((await get('Binary/note')).status).toBe(200);
      const jsonEvents = take();
      expect((await get('Binary/note', 'text/plain')).status).toBe(200);
      expect(take()).toEqual(jsonEvents);
    });

    it("applies a SMART user's limits: a Binary is in no patient's compartment", async () => {
      const app = await t.newClient(projectId, { name: 'smart app', scope: APP_SCOPE });
      const patientUser = await smartUser(t.storage, projectId, {
        id: 'u-pat',
        userType: 'Patient',
        profileId: 'pat-a',
      });
      const doctorUser = await smartUser(t.storage, projectId, {
        id: 'u-doc',
        userType: 'Practitioner',
        profileId: 'pr-1',
      });
      const patient = await userBearer(t.storage, app.id, patientUser, ['user/*.rs']);
      const doctor = await userBearer(t.storage, app.id, doctorUser, ['user/*.rs']);
      for (const accept of ['application/fhir+json', 'text/plain']) {
        expect((await get('Binary/note', accept, patient)).status, accept).toBe(404);
        expect((await get('Binary/note/_history/1', accept, patient)).status, accept).toBe(404);
        expect((await get('Binary/note', accept, doctor)).status, accept).toBe(200);
      }
      expect((await get('Binary/note', 'text/plain', doctor)).text).toBe(TEXT);
    });
  }),
);
