import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirErrorHandler, oauthErrorHandler, scimErrorHandler } from '../../src/http/error-rendering.js';
import { FhirError, OAuthError, ScimError } from '../../src/http/http-error.js';
import { jsonBody } from '../../src/http/body.js';
import { asyncHandler } from '../../src/http/async-handler.js';
import { NotFoundError, ConflictError, InvalidRecordError } from '../../src/storage/errors.js';

function app(handler: express.ErrorRequestHandler, thrower: () => Promise<never>) {
  const a = express();
  const r = express.Router();
  r.post('/x', jsonBody({ types: ['application/json'], limit: 100 }), (_req, res) => {
    res.json({ ok: true });
  });
  r.get(
    '/x',
    asyncHandler(async () => thrower()),
  );
  r.use(handler);
  a.use('/mount', r);
  return a;
}

const silent = () => undefined;

describe('error rendering', () => {
  it('renders FhirError as OperationOutcome with expression', async () => {
    const res = await request(
      app(fhirErrorHandler(silent), () =>
        Promise.reject(new FhirError(400, 'invalid', 'bad', { expression: ['Parameters.parameter'] })),
      ),
    ).get('/mount/x');
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/application\/fhir\+json/);
    expect(res.body.resourceType).toBe('OperationOutcome');
    expect(res.body.issue[0]).toMatchObject({
      severity: 'error',
      code: 'invalid',
      expression: ['Parameters.parameter'],
    });
  });

  it('maps storage errors and hides internal errors', async () => {
    const notFound = await request(
      app(fhirErrorHandler(silent), () => Promise.reject(new NotFoundError('x'))),
    ).get('/mount/x');
    expect(notFound.status).toBe(404);
    expect(notFound.body.issue[0].code).toBe('not-found');
    const invalid = await request(
      app(fhirErrorHandler(silent), () => Promise.reject(new InvalidRecordError('bad id'))),
    ).get('/mount/x');
    expect(invalid.status).toBe(400);
    expect(invalid.body.issue[0].code).toBe('invalid');
    const internal = await request(
      app(fhirErrorHandler(silent), () => Promise.reject(new Error('secret'))),
    ).get('/mount/x');
    expect(internal.status).toBe(500);
    expect(JSON.stringify(internal.body)).not.toContain('secret');
  });

  it('renders SCIM errors with scimType and string status', async () => {
    const res = await request(
      app(scimErrorHandler(silent), () => Promise.reject(new ScimError(400, 'invalidFilter', 'bad filter'))),
    ).get('/mount/x');
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
    expect(res.body).toEqual({
      schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'],
      status: '400',
      scimType: 'invalidFilter',
      detail: 'bad filter',
    });
    const conflict = await request(
      app(scimErrorHandler(silent), () => Promise.reject(new ConflictError('dup'))),
    ).get('/mount/x');
    expect(conflict.body).toMatchObject({ status: '409', scimType: 'uniqueness' });
  });

  it('renders OAuth errors with no-store', async () => {
    const res = await request(
      app(oauthErrorHandler(silent), () => Promise.reject(new OAuthError(400, 'invalid_scope', 'no'))),
    ).get('/mount/x');
    expect(res.status).toBe(400);
    expect(res.headers['cache-control']).toBe('no-store');
    expect(res.body).toEqual({ error: 'invalid_scope', error_description: 'no' });
  });

  it('answers malformed JSON 400, oversized 413 and wrong media type 415', async () => {
    const a = app(scimErrorHandler(silent), () => Promise.reject(new Error('unused')));
    const bad = await request(a).post('/mount/x').set('Content-Type', 'application/json').send('{"a":');
    expect(bad.status).toBe(400);
    expect(bad.body.scimType).toBe('invalidSyntax');
    const big = await request(a)
      .post('/mount/x')
      .set('Content-Type', 'application/json')
      .send(JSON.stringify({ a: 'x'.repeat(200) }));
    expect(big.status).toBe(413);
    const wrongType = await request(a).post('/mount/x').set('Content-Type', 'text/plain').send('hello');
    expect(wrongType.status).toBe(415);
  });
});

describe('malformed URLs', () => {
  it('answers a bad %-escape in a path parameter with 400, not 500', async () => {
    const a = express();
    const r = express.Router();
    r.get('/items/:id', (req, res) => {
      res.json({ id: req.params.id });
    });
    r.use(fhirErrorHandler(silent));
    a.use('/m', r);
    const res = await request(a).get('/m/items/%ZZ');
    expect(res.status).toBe(400);
    expect(res.body.resourceType).toBe('OperationOutcome');
  });
});
