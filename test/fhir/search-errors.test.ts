import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { fhirRouter } from '../../src/fhir/router.js';
import { fhirErrorOfSearch } from '../../src/fhir/search/search-errors.js';
import { FhirError } from '../../src/http/http-error.js';
import { SearchParameterError } from '../../src/search/search-error.js';
import { memoryStorage } from '../../src/stores.js';
import { afterTest } from '../helpers/cleanup.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';

// A search refused by src/search (protocol-free) is answered by the FHIR layer as the 400
// OperationOutcome it always was: in a plain search, and in each entry of a batch.
const BASE = '/fhir/R4';
const auth = testToken({ projectId: 'p1', scopes: ['system/*.*'] });

async function app(): Promise<express.Express> {
  const storage = memoryStorage();
  afterTest(() => storage.close());
  await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
  const app = express();
  app.use(BASE, fhirRouter({ storage, authenticate: testAuthenticate, onError: () => undefined }));
  return app;
}

describe('search errors in the FHIR layer', () => {
  it('maps a SearchParameterError to a 400 FhirError with its issue code, text and parameter', () => {
    const mapped = fhirErrorOfSearch(
      new SearchParameterError('too-costly', '_sort takes at most 2 keys', '_sort'),
    );
    expect(mapped).toBeInstanceOf(FhirError);
    expect(mapped).toMatchObject({
      status: 400,
      issueCode: 'too-costly',
      code: 'ERR_FHIR_TOO_COSTLY',
      message: '_sort takes at most 2 keys',
      expression: ['_sort'],
    });
    const bare = fhirErrorOfSearch(new SearchParameterError('not-supported', 'no chains here'));
    expect(bare).toMatchObject({ status: 400, issueCode: 'not-supported' });
    expect((bare as FhirError).expression).toBeUndefined();
    const other = new Error('other');
    expect(fhirErrorOfSearch(other)).toBe(other);
  });

  it('answers a bad search parameter of a batch entry in that entry, as a plain search does', async () => {
    const server = await app();
    const plain = await request(server).get(`${BASE}/Patient?nickname=x`).set('Authorization', auth);
    expect(plain.status).toBe(400);
    const res = await request(server)
      .post(BASE)
      .set('Authorization', auth)
      .set('Content-Type', 'application/fhir+json')
      .send({
        resourceType: 'Bundle',
        type: 'batch',
        entry: [
          { request: { method: 'GET', url: 'Patient?nickname=x' } },
          { request: { method: 'GET', url: 'Patient?birthdate=notadate' } },
          { request: { method: 'GET', url: 'Patient' } },
        ],
      });
    expect(res.status).toBe(200);
    const [unknown, malformed, fine] = res.body.entry as {
      response: { status: string; outcome: { issue: Record<string, unknown>[] } };
    }[];
    expect(unknown!.response.status).toBe('400');
    expect(unknown!.response.outcome.issue[0]).toMatchObject(plain.body.issue[0]);
    expect(malformed!.response.status).toBe('400');
    expect(malformed!.response.outcome.issue[0]).toMatchObject({
      code: 'invalid',
      expression: ['birthdate'],
    });
    expect(fine!.response.status).toBe('200 OK');
  });
});
