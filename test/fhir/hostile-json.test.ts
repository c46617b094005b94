import express from 'express';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import type { FhirRouterOptions } from '../../src/fhir/router-options.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

const BASE = '/api/fhir/R4';
const FHIR_JSON = 'application/fhir+json';

/** Every name a plain object inherits, as a client could send it as a JSON key. */
const INHERITED = Object.getOwnPropertyNames(Object.prototype);

interface TestApp {
  app: express.Express;
  storage: Storage;
  errors: unknown[];
}

async function createTestApp(options: Partial<FhirRouterOptions> = {}): Promise<TestApp> {
  const storage = memoryStorage();
  await storage.createProject({ id: 'strict', name: 'Strict', strictMode: true });
  await storage.createProject({ id: 'lenient', name: 'Lenient', strictMode: false });
  const errors: unknown[] = [];
  const app = express();
  app.use(
    BASE,
    fhirRouter({ storage, authenticate: testAuthenticate, onError: (e) => errors.push(e), ...options }),
  );
  return { app, storage, errors };
}

const auth = (projectId: string) => testToken({ projectId, scopes: ['system/*.*'] });

/** Sends raw JSON text (so `__proto__` stays a key, as a client would send it). */
function send(app: express.Express, method: 'post' | 'put', path: string, json: string, project = 'strict') {
  const agent = request(app);
  const req = method === 'post' ? agent.post(`${BASE}${path}`) : agent.put(`${BASE}${path}`);
  return req.set('Authorization', auth(project)).set('Content-Type', FHIR_JSON).send(json);
}

/** A Patient whose extensions nest `levels` deep (each level is an `extension` array and an object). */
function deepPatientJson(levels: number): string {
  const open = '{"url":"http://example.org/x","extension":['.repeat(levels);
  const close = ']}'.repeat(levels);
  return `{"resourceType":"Patient","extension":[${open}{"url":"http://example.org/x","valueString":"x"}${close}]}`;
}

/** JSON nested `depth` levels deep in total (arrays inside the top-level object). */
function nestedJson(depth: number): string {
  return `{"resourceType":"Patient","extension":${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}}`;
}

let t: TestApp;
beforeEach(async () => {
  t = await createTestApp();
});
afterEach(async () => {
  await t.storage.close();
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
});

describe('inputs the validation library itself trips over', () => {
  it('answers 400, never 500, when the validator throws on a malformed primitive extension array', async () => {
    const res = await send(
      t.app,
      'post',
      '/Observation',
      '{"resourceType":"Observation","status":"final","_status":[{"id":"x"},{"id":"x"}],"code":{"text":"x"}}',
    );
    expectOperationOutcome(res, 400);
    expect(t.errors).toEqual([]);
  });
});

describe('keys named like Object.prototype properties', () => {
  it('are unknown elements in a strict project: POST and PUT answer 400, top level and nested', async () => {
    for (const name of INHERITED) {
      const key = JSON.stringify(name);
      const top = await send(
        t.app,
        'post',
        '/Patient',
        `{"resourceType":"Patient",${key}:{"polluted":"yes"}}`,
      );
      expectOperationOutcome(top, 400, 'structure');
      expect(top.body.issue[0].expression).toEqual([`Patient.${name}`]);

      const put = await send(t.app, 'put', '/Patient/p1', `{"resourceType":"Patient","id":"p1",${key}:"x"}`);
      expectOperationOutcome(put, 400, 'structure');
      expect(put.body.issue[0].expression).toEqual([`Patient.${name}`]);

      const nested = await send(
        t.app,
        'post',
        '/Observation',
        `{"resourceType":"Observation","status":"final","code":{"text":"t",${key}:{"polluted":"yes"}}}`,
      );
      expectOperationOutcome(nested, 400, 'structure');
      expect(nested.body.issue[0].expression).toEqual([`Observation.code.${name}`]);

      const inArray = await send(
        t.app,
        'post',
        '/Patient',
        `{"resourceType":"Patient","name":[{"family":"F"},{"family":"G","_${name}":{}}]}`,
      );
      expectOperationOutcome(inArray, 400, 'structure');
      expect(inArray.body.issue[0].expression).toEqual([`Patient.name[1]._${name}`]);
    }
    // Same shape as any other unknown element.
    const unknown = await send(t.app, 'post', '/Patient', '{"resourceType":"Patient","x":{}}');
    expectOperationOutcome(unknown, 400, 'structure');
    expect(unknown.body.issue[0].expression).toEqual(['Patient.x']);
    expect((await t.storage.searchResources('strict', 'Patient', { count: 10 })).total).toBe(0);
    expect((await t.storage.searchResources('strict', 'Observation', { count: 10 })).total).toBe(0);
    expect(t.errors).toEqual([]);
  });

  it('are refused inside a strict transaction, which then writes nothing', async () => {
    const bundle = `{"resourceType":"Bundle","type":"transaction","entry":[
      {"fullUrl":"urn:uuid:1","resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}},
      {"resource":{"resourceType":"Patient","constructor":{"name":"x"}},"request":{"method":"POST","url":"Patient"}}]}`;
    const res = await send(t.app, 'post', '', bundle);
    expectOperationOutcome(res, 400, 'structure');
    expect(res.body.issue[0].expression).toEqual(['Bundle.entry[1].resource.constructor']);
    expect((await t.storage.searchResources('strict', 'Patient', { count: 10 })).total).toBe(0);
  });

  it('are stored as plain data in a lenient project, without touching any prototype', async () => {
    const json =
      '{"resourceType":"Patient","__proto__":{"polluted":"yes"},"constructor":{"polluted":"yes"},"toString":"x"}';
    const created = await send(t.app, 'post', '/Patient', json, 'lenient');
    expect(created.status).toBe(201);
    const read = await request(t.app)
      .get(`${BASE}/Patient/${created.body.id}`)
      .set('Authorization', auth('lenient'))
      .buffer(true)
      .parse((res, done) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
        res.on('end', () => done(null, text));
      });
    expect(read.status).toBe(200);
    const body = JSON.parse(read.body as string) as Record<string, unknown>;
    expect(Object.hasOwn(body, '__proto__')).toBe(true);
    expect(Object.getOwnPropertyDescriptor(body, 'toString')?.value).toBe('x');
    const stored = await t.storage.readResource('lenient', 'Patient', created.body.id as string);
    expect(Object.getPrototypeOf(stored)).toBe(Object.prototype);
    expect((stored as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('inherited names elsewhere in FHIR input', () => {
  it('are plain strings as Bundle fullUrls, references and search parameters', async () => {
    const bundle = JSON.stringify({
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          fullUrl: '__proto__',
          resource: { resourceType: 'Patient' },
          request: { method: 'POST', url: 'Patient' },
        },
        {
          fullUrl: 'constructor',
          resource: { resourceType: 'Patient' },
          request: { method: 'POST', url: 'Patient' },
        },
        {
          resource: {
            resourceType: 'Observation',
            status: 'final',
            code: { text: 't' },
            subject: { reference: '__proto__' },
            performer: [{ reference: 'constructor' }, { reference: 'toString' }],
          },
          request: { method: 'POST', url: 'Observation' },
        },
      ],
    });
    const res = await send(t.app, 'post', '', bundle, 'lenient');
    expect(res.status).toBe(200);
    const [first, second, third] = res.body.entry as { response: { location: string } }[];
    const idOf = (entry: { response: { location: string } } | undefined) =>
      entry!.response.location.split('/').slice(0, 2).join('/');
    const observation = await t.storage.readResource('lenient', 'Observation', idOf(third).split('/')[1]!);
    expect(observation.subject).toEqual({ reference: idOf(first) });
    expect(observation.performer).toEqual([{ reference: idOf(second) }, { reference: 'toString' }]);

    const search = (query: string, prefer?: string) => {
      const req = request(t.app).get(`${BASE}/Patient?${query}`).set('Authorization', auth('lenient'));
      return prefer ? req.set('Prefer', prefer) : req;
    };
    const lenient = await search('constructor=x&__proto__=y&toString=z&_total=accurate', 'handling=lenient');
    expect(lenient.status).toBe(200);
    expect(lenient.body.total).toBe(2);
    expectOperationOutcome(await search('constructor=x'), 400, 'invalid');
    expectOperationOutcome(await search('__proto__=x', 'handling=strict'), 400, 'invalid');
    expectOperationOutcome(await search('name:toString=x'), 400, 'not-supported');
  });
});

describe('JSON nesting depth', () => {
  it('PATCH: inherited names are unknown elements in a strict project, never a prototype change', async () => {
    const patch = (id: string, json: string, project: string, type = 'application/json-patch+json') =>
      request(t.app)
        .patch(`${BASE}/Patient/${id}`)
        .set('Authorization', auth(project))
        .set('Content-Type', type)
        .send(json);
    for (const project of ['strict', 'lenient']) {
      const created = await send(t.app, 'post', '/Patient', '{"resourceType":"Patient"}', project);
      const id = created.body.id as string;
      for (const name of INHERITED) {
        const key = JSON.stringify(name);
        const value = `{"polluted":"yes",${JSON.stringify('__proto__')}:{"polluted":"yes"}}`;
        const res = await patch(
          id,
          `[{"op":"add","path":${JSON.stringify(`/${name}`)},"value":${value}}]`,
          project,
        );
        if (name === '__proto__') expectOperationOutcome(res, 400, 'invalid');
        else if (project === 'strict') expectOperationOutcome(res, 400, 'structure');
        else expect(res.status).toBe(200);
        const nested = await patch(id, `[{"op":"add","path":"/name","value":[{${key}:${value}}]}]`, project);
        if (project === 'strict') expectOperationOutcome(nested, 400, 'structure');
        else expect(nested.status).toBe(200);
      }
      const deep = await patch(
        id,
        `[{"op":"add","path":"/extension","value":[${deepPatientJson(5000)}]}]`,
        project,
      );
      expectOperationOutcome(deep, 400, 'invalid');
      const binary = `{"resourceType":"Bundle","type":"batch","entry":[{"resource":{"resourceType":"Binary",
        "contentType":"application/json-patch+json","data":"${Buffer.from(`[{"op":"add","path":"/x","value":${nestedJson(5000)}}]`).toString('base64')}"},
        "request":{"method":"PATCH","url":"Patient/${id}"}}]}`;
      const bundle = await send(t.app, 'post', '', binary, project);
      expect(bundle.status).toBe(200);
      expect(bundle.body.entry[0].response.status).toMatch(/^400/);
    }
    expect(t.errors).toEqual([]);
  });

  it('answers 400 OperationOutcome, not 500, for a Patient with extensions nested 5,000 deep', async () => {
    for (const project of ['strict', 'lenient']) {
      const res = await send(t.app, 'post', '/Patient', deepPatientJson(5000), project);
      expectOperationOutcome(res, 400, 'invalid');
      const put = await send(
        t.app,
        'put',
        '/Patient/deep',
        deepPatientJson(5000).replace('{', '{"id":"deep",'),
        project,
      );
      expectOperationOutcome(put, 400, 'invalid');
    }
    expect(t.errors).toEqual([]);
  });

  it('answers 400 for a deep entry of a batch or a transaction Bundle', async () => {
    for (const type of ['batch', 'transaction']) {
      const bundle = `{"resourceType":"Bundle","type":"${type}","entry":[
        {"resource":{"resourceType":"Patient"},"request":{"method":"POST","url":"Patient"}},
        {"resource":${deepPatientJson(5000)},"request":{"method":"POST","url":"Patient"}}]}`;
      for (const project of ['strict', 'lenient'])
        expectOperationOutcome(await send(t.app, 'post', '', bundle, project), 400, 'invalid');
    }
    expect((await t.storage.searchResources('lenient', 'Patient', { count: 10 })).total).toBe(0);
    expect(t.errors).toEqual([]);
  });

  it('accepts resources at normal depth, up to the limit, and counts brackets in strings as text', async () => {
    const ok = await send(t.app, 'post', '/Patient', deepPatientJson(5), 'strict');
    expect(ok.status).toBe(201);
    expect(ok.body.extension[0].extension[0].url).toBe('http://example.org/x');
    const brackets = await send(
      t.app,
      'post',
      '/Patient',
      JSON.stringify({ resourceType: 'Patient', name: [{ text: '[[[[{{{{'.repeat(1000) }] }),
      'strict',
    );
    expect(brackets.status).toBe(201);
    expect((await send(t.app, 'post', '/Patient', nestedJson(100), 'lenient')).status).toBe(201);
    expectOperationOutcome(await send(t.app, 'post', '/Patient', nestedJson(101), 'lenient'), 400, 'invalid');
  });

  it('honours maxJsonDepth and validates it when the router is created', async () => {
    const small = await createTestApp({ maxJsonDepth: 3 });
    expect((await send(small.app, 'post', '/Patient', nestedJson(3), 'lenient')).status).toBe(201);
    expectOperationOutcome(
      await send(small.app, 'post', '/Patient', nestedJson(4), 'lenient'),
      400,
      'invalid',
    );
    await small.storage.close();
    for (const maxJsonDepth of [0, -1, 1.5, Number.NaN]) {
      expect(() => fhirRouter({ storage: t.storage, authenticate: testAuthenticate, maxJsonDepth })).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
      );
    }
  });

  it('reports a deep NDJSON line and loads the others', async () => {
    for (const project of ['strict', 'lenient']) {
      const file = `{"resourceType":"Patient"}\n${deepPatientJson(5000)}\n{"resourceType":"Patient"}\n`;
      const res = await request(t.app)
        .post(BASE)
        .set('Authorization', auth(project))
        .attach('f', Buffer.from(file), { filename: 'deep.ndjson', contentType: 'application/fhir+ndjson' });
      expectOperationOutcome(res, 200);
      const errors = res.body.issue.filter((i: { severity: string }) => i.severity === 'error');
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ code: 'structure', location: ['deep.ndjson:2'] });
      expect((await t.storage.searchResources(project, 'Patient', { count: 10 })).total).toBe(2);
    }
    expect(t.errors).toEqual([]);
  });
});
