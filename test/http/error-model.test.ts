import fs from 'node:fs';
import express from 'express';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ERRORS_PAGE, errorTableCells, errorTableCellsIn } from '../../scripts/error-docs.js';
import { AccessTokenError } from '../../src/auth/access/access-token.js';
import { ClientAssertionError } from '../../src/auth/client/client-assertion.js';
import { ensureSuperAdminClient } from '../../src/auth/client/super-admin.js';
import { GateFullError } from '../../src/auth/client/concurrency-gate.js';
import { FailureLimitError } from '../../src/auth/client/failure-limiter.js';
import { jwksHandler } from '../../src/auth/keys/jwks-handler.js';
import { tokenRouter } from '../../src/auth/token/token-router.js';
import { ExportTooLargeError } from '../../src/bulk/byte-budget.js';
import { bulkExportRouter, type BulkExportRouter } from '../../src/bulk/router.js';
import { InvalidOptionError, PlatformError, type ErrorCode } from '../../src/errors.js';
import { FhirOutcomeError } from '../../src/http/outcome.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { unauthorized } from '../../src/http/authenticate.js';
import { jsonTooDeep } from '../../src/http/body.js';
import { toHttpError } from '../../src/http/error-rendering.js';
import { ERROR_TABLE } from '../../src/http/error-table.js';
import {
  FhirError,
  HttpError,
  OAuthError,
  ScimError,
  type OAuthErrorType,
} from '../../src/http/http-error.js';
import { projectRouter } from '../../src/project/router.js';
import { scimRouter } from '../../src/scim/router.js';
import {
  ConflictError,
  InvalidRecordError,
  NotFoundError,
  PreconditionFailedError,
  StorageClosedError,
  StorageError,
  StorageLockedError,
  StorageUnavailableError,
  SearchTooCostlyError,
  UnsupportedSearchError,
} from '../../src/storage/errors.js';
import { memoryStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { testAuthenticate, testToken } from '../helpers/test-auth.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * Every error that can reach a router, sent through every router from a real request (a storage
 * method rejects with it), and checked against the one table of answers, `ERROR_TABLE`; and
 * docs/errors.md checked against that table.
 */

const SECRET_TEXT = 'secret-detail';

interface Sample {
  /** The code the error is answered as (its row of `ERROR_TABLE`). */
  code: ErrorCode;
  label: string;
  error: () => unknown;
}

const CODES = Object.keys(ERROR_TABLE) as ErrorCode[];

/** Protocol errors built from their row, so the row's issue, scimType and `error` must give back its code. */
function rowSamples(code: ErrorCode): Sample[] {
  const { status, issue, scimType, oauthError } = ERROR_TABLE[code];
  if (code.startsWith('ERR_FHIR_')) {
    return [{ code, label: `FhirError ${issue}`, error: () => new FhirError(status, issue, SECRET_TEXT) }];
  }
  if (code.startsWith('ERR_SCIM_')) {
    return [
      { code, label: `ScimError ${scimType}`, error: () => new ScimError(status, scimType, SECRET_TEXT) },
    ];
  }
  if (code.startsWith('ERR_OAUTH_')) {
    const error = oauthError as OAuthErrorType;
    return [{ code, label: `OAuthError ${error}`, error: () => new OAuthError(status, error, SECRET_TEXT) }];
  }
  if (code.startsWith('ERR_STORAGE_') || code.startsWith('ERR_EXPORT_')) return [];
  return [
    { code, label: `HttpError ${code}`, error: () => new HttpError(status, code, SECRET_TEXT) },
    { code, label: `PlatformError ${code}`, error: () => new PlatformError(code, SECRET_TEXT) },
  ];
}

const bodyParserError = (props: Record<string, unknown>) => () =>
  Object.assign(new Error(SECRET_TEXT), { expose: true, ...props });

/** The errors the kit's own modules throw, and what else a router can meet. */
const THROWN: Sample[] = [
  { code: 'ERR_STORAGE_NOT_FOUND', label: 'NotFoundError', error: () => new NotFoundError(SECRET_TEXT) },
  {
    code: 'ERR_GONE',
    label: 'NotFoundError deleted',
    error: () => new NotFoundError(SECRET_TEXT, { deleted: true }),
  },
  {
    code: 'ERR_STORAGE_CONFLICT',
    label: 'ConflictError',
    error: () => new ConflictError(SECRET_TEXT, { attribute: 'userName' }),
  },
  {
    code: 'ERR_STORAGE_PRECONDITION_FAILED',
    label: 'PreconditionFailedError',
    error: () => new PreconditionFailedError(SECRET_TEXT),
  },
  {
    code: 'ERR_STORAGE_INVALID',
    label: 'InvalidRecordError',
    error: () => new InvalidRecordError(SECRET_TEXT),
  },
  {
    code: 'ERR_STORAGE_CLOSED',
    label: 'StorageClosedError',
    error: () => new StorageClosedError(SECRET_TEXT),
  },
  {
    code: 'ERR_STORAGE_LOCKED',
    label: 'StorageLockedError',
    error: () => new StorageLockedError(SECRET_TEXT),
  },
  {
    code: 'ERR_STORAGE_UNAVAILABLE',
    label: 'StorageUnavailableError',
    error: () =>
      new StorageUnavailableError(SECRET_TEXT, {
        cause: Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }),
      }),
  },
  {
    code: 'ERR_STORAGE_TOO_COSTLY',
    label: 'SearchTooCostlyError',
    error: () => new SearchTooCostlyError(SECRET_TEXT),
  },
  {
    code: 'ERR_STORAGE_UNSUPPORTED_SEARCH',
    label: 'UnsupportedSearchError',
    error: () => new UnsupportedSearchError(SECRET_TEXT),
  },
  ...(
    [
      'ERR_STORAGE_BROKEN',
      'ERR_STORAGE_CORRUPT',
      'ERR_STORAGE_IN_TRANSACTION',
      'ERR_STORAGE_TRANSACTION_ENDED',
      'ERR_STORAGE_TRANSACTION_ABORTED',
    ] as const
  ).map((code) => ({
    code,
    label: `StorageError ${code}`,
    error: () => new StorageError(code, SECRET_TEXT),
  })),
  {
    code: 'ERR_ACCESS_TOKEN_INVALID',
    label: 'AccessTokenError',
    error: () => new AccessTokenError('invalid', SECRET_TEXT),
  },
  {
    code: 'ERR_CLIENT_ASSERTION_INVALID',
    label: 'ClientAssertionError',
    error: () => new ClientAssertionError('signature', SECRET_TEXT),
  },
  {
    code: 'ERR_TOO_MANY_FAILURES',
    label: 'FailureLimitError too-many-failures',
    error: () => new FailureLimitError('too-many-failures', 5000),
  },
  {
    code: 'ERR_SECRET_CHECKS_BUSY',
    label: 'FailureLimitError busy',
    error: () => new FailureLimitError('busy', 1000),
  },
  { code: 'ERR_GATE_FULL', label: 'GateFullError', error: () => new GateFullError() },
  { code: 'ERR_EXPORT_TOO_LARGE', label: 'ExportTooLargeError', error: () => new ExportTooLargeError(10) },
  ...(
    [
      'ERR_EXPORT_STOPPED',
      'ERR_EXPORT_JOB_INVALID',
      'ERR_EXPORT_TASK_INVALID',
      'ERR_EXPORT_POOL_CLOSED',
      'ERR_EXPORT_WORKER_NOT_FOUND',
    ] as const
  ).map((code) => ({
    code,
    label: `PlatformError ${code}`,
    error: () => new PlatformError(code, SECRET_TEXT),
  })),
  {
    code: 'ERR_INVALID_OPTION',
    label: 'InvalidOptionError',
    error: () => new InvalidOptionError(SECRET_TEXT),
  },
  { code: 'ERR_NOT_FOUND', label: 'ScimError 404', error: () => new ScimError(404, undefined, SECRET_TEXT) },
  {
    code: 'ERR_METHOD_NOT_ALLOWED',
    label: 'ScimError 405',
    error: () => new ScimError(405, undefined, SECRET_TEXT, { headers: { Allow: 'GET' } }),
  },
  {
    code: 'ERR_UNAUTHORIZED',
    label: 'unauthorized()',
    error: () => unauthorized(SECRET_TEXT, 'invalid_token'),
  },
  { code: 'ERR_JSON_TOO_DEEP', label: 'jsonTooDeep()', error: () => jsonTooDeep(3) },
  {
    code: 'ERR_FHIR_VALUE',
    label: 'FhirOutcomeError',
    error: () =>
      new FhirOutcomeError(400, [
        { severity: 'error', code: 'value', details: { text: 'bad value' }, expression: ['Patient.gender'] },
        { severity: 'warning', code: 'invariant', details: { text: 'a warning' } },
      ]),
  },
  { code: 'ERR_MALFORMED_URL', label: 'URIError', error: () => new URIError(SECRET_TEXT) },
  {
    code: 'ERR_INVALID_JSON',
    label: 'body parser: malformed JSON',
    error: bodyParserError({ type: 'entity.parse.failed', status: 400 }),
  },
  {
    code: 'ERR_BODY_TOO_LARGE',
    label: 'body parser: too large',
    error: bodyParserError({ type: 'entity.too.large', status: 413 }),
  },
  {
    code: 'ERR_UNSUPPORTED_ENCODING',
    label: 'body parser: charset',
    error: bodyParserError({ type: 'charset.unsupported', status: 415 }),
  },
  {
    code: 'ERR_REQUEST_ABORTED',
    label: 'body parser: aborted',
    error: bodyParserError({ type: 'request.aborted', status: 400 }),
  },
  { code: 'ERR_BAD_REQUEST', label: 'body parser: other 400', error: bodyParserError({ status: 400 }) },
  { code: 'ERR_INTERNAL', label: 'a bare Error', error: () => new Error(SECRET_TEXT) },
  { code: 'ERR_INTERNAL', label: 'a thrown string', error: () => SECRET_TEXT },
];

const SAMPLES: Sample[] = [...CODES.flatMap(rowSamples), ...THROWN];

type Protocol = 'fhir' | 'scim' | 'oauth';

interface Probe {
  name: string;
  protocol: Protocol;
  /** The storage method the request goes through, replaced by one that rejects. */
  method: 'readResource' | 'readExportJob' | 'listClients' | 'readUser' | 'listSigningKeys';
  storage: Storage;
  send(): request.Test;
}

/** Makes the probe's storage method reject with `error` (until `mockRestore`). */
function rejectWith(probe: Probe, error: unknown) {
  const methods = probe.storage as unknown as Record<Probe['method'], () => Promise<unknown>>;
  return vi.spyOn(methods, probe.method).mockRejectedValue(error);
}

const onError = vi.fn();
const PROJECT = 'p1';
const ADMIN = testToken({ projectId: PROJECT, admin: true });
const JOB_ID = '7d3c2a36-3b6e-4e67-9a0a-0c1b2d3e4f50';
const SUPER_ID = 'root-client';
const SUPER_SECRET = 'a long and random enough super admin secret';

let exportDir: string;
let bulk: BulkExportRouter;
const probes: Probe[] = [];

async function projectStorage(): Promise<Storage> {
  const storage = memoryStorage();
  await storage.createProject({ id: PROJECT, name: 'One', strictMode: false });
  return storage;
}

beforeAll(async () => {
  exportDir = tempDir('fpk-error-model-');
  const common = { authenticate: testAuthenticate, onError };

  const fhir = await projectStorage();
  const fhirApp = express().use('/api/fhir/R4', fhirRouter({ storage: fhir, ...common }));
  probes.push({
    name: 'fhirRouter (read)',
    protocol: 'fhir',
    method: 'readResource',
    storage: fhir,
    send: () => request(fhirApp).get('/api/fhir/R4/Patient/pat1').set('Authorization', ADMIN),
  });

  const bulkStorage = await projectStorage();
  bulk = bulkExportRouter({ storage: bulkStorage, exportDir, ...common });
  await bulk.ready;
  const bulkApp = express().use('/api/fhir/R4', bulk);
  probes.push({
    name: 'bulkExportRouter (status)',
    protocol: 'fhir',
    method: 'readExportJob',
    storage: bulkStorage,
    send: () => request(bulkApp).get(`/api/fhir/R4/$export-status/${JOB_ID}`).set('Authorization', ADMIN),
  });

  const project = await projectStorage();
  const projectApp = express().use('/api/fhir/R4', projectRouter({ storage: project, ...common }));
  probes.push({
    name: 'projectRouter (clients)',
    protocol: 'fhir',
    method: 'listClients',
    storage: project,
    send: () =>
      request(projectApp)
        .get(`/api/fhir/R4/Project/${PROJECT}/ClientApplication`)
        .set('Authorization', ADMIN),
  });

  const scim = await projectStorage();
  const scimApp = express().use('/api/scim/v2', scimRouter({ storage: scim, ...common }));
  probes.push({
    name: 'scimRouter (read user)',
    protocol: 'scim',
    method: 'readUser',
    storage: scim,
    send: () => request(scimApp).get('/api/scim/v2/Users/u1').set('Authorization', ADMIN),
  });

  const token = memoryStorage();
  await ensureSuperAdminClient(token, { clientId: SUPER_ID, clientSecret: SUPER_SECRET });
  const tokenApp = express().use('/api/oauth2/token', tokenRouter({ storage: token, onError }));
  const basic = `Basic ${Buffer.from(`${SUPER_ID}:${SUPER_SECRET}`).toString('base64')}`;
  probes.push({
    name: 'tokenRouter (signing key)',
    protocol: 'oauth',
    method: 'listSigningKeys',
    storage: token,
    send: () =>
      request(tokenApp)
        .post('/api/oauth2/token')
        .set('Authorization', basic)
        .type('form')
        .send({ grant_type: 'client_credentials' }),
  });

  const jwks = memoryStorage();
  const jwksApp = express().get('/api/oauth2/jwks', jwksHandler({ storage: jwks, onError }));
  probes.push({
    name: 'jwksHandler',
    protocol: 'oauth',
    method: 'listSigningKeys',
    storage: jwks,
    send: () => request(jwksApp).get('/api/oauth2/jwks'),
  });
});

afterAll(async () => {
  await bulk?.close();
  fs.rmSync(exportDir, { recursive: true, force: true });
});

describe('ERROR_TABLE', () => {
  it('has a sample for every code, and each sample is answered as its code', () => {
    const sampled = new Set(SAMPLES.map((s) => s.code));
    expect(CODES.filter((code) => !sampled.has(code))).toEqual([]);
    for (const sample of SAMPLES) {
      const error = toHttpError(sample.error());
      expect({ label: sample.label, code: error.code }).toEqual({ label: sample.label, code: sample.code });
      expect(error.status).toBe(ERROR_TABLE[sample.code].status);
    }
  });

  it('gives an OAuth error that follows the status unless the row names one', () => {
    for (const code of CODES) {
      const { status, oauthError } = ERROR_TABLE[code];
      // A 503 the client may retry is `temporarily_unavailable` (RFC 6749 §5.2 names it for the
      // authorization endpoint; the token endpoint uses it the same way).
      const retry = status === 503 && oauthError === 'temporarily_unavailable';
      if (status >= 500)
        expect(oauthError === 'server_error' || retry || code.startsWith('ERR_OAUTH_')).toBe(true);
      if (status === 401) expect(oauthError).toBe('invalid_client');
    }
  });
});

const OWN: Record<Protocol, (error: unknown) => boolean> = {
  fhir: (error) => error instanceof FhirError,
  scim: (error) => error instanceof ScimError,
  oauth: (error) => error instanceof OAuthError,
};

describe.each([
  'fhirRouter (read)',
  'bulkExportRouter (status)',
  'projectRouter (clients)',
  'scimRouter (read user)',
  'tokenRouter (signing key)',
  'jwksHandler',
])('every error through %s', (name) => {
  it.each(SAMPLES.map((s) => [s.label, s] as const))('%s', async (_label, sample) => {
    const probe = probes.find((p) => p.name === name)!;
    const error = sample.error();
    const spy = rejectWith(probe, error);
    onError.mockClear();
    try {
      const res = await probe.send();
      expect(spy).toHaveBeenCalled();
      const row = ERROR_TABLE[sample.code];
      expect(res.status).toBe(row.status);
      if (row.status >= 500)
        expect(onError).toHaveBeenCalledWith(error, expect.objectContaining({ method: expect.any(String) }));
      else expect(onError).not.toHaveBeenCalled();
      // 5xx details are hidden, except in the router's own protocol error.
      if (row.status >= 500 && !OWN[probe.protocol](error)) expect(res.text).not.toContain(SECRET_TEXT);
      if (error instanceof HttpError) {
        for (const [header, value] of Object.entries(error.headers))
          expect(res.headers[header.toLowerCase()]).toBe(value);
      } else if (row.retryAfter !== undefined) {
        expect(res.headers['retry-after']).toBe(String(row.retryAfter));
      }
      switch (probe.protocol) {
        case 'fhir':
          expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
          expect(res.body.resourceType).toBe('OperationOutcome');
          expect(res.body.issue[0]).toMatchObject({
            severity: row.status >= 500 ? 'fatal' : 'error',
            code: row.issue,
          });
          break;
        case 'scim':
          expect(res.headers['content-type']).toMatch(/^application\/scim\+json/);
          expect(res.body.schemas).toEqual(['urn:ietf:params:scim:api:messages:2.0:Error']);
          expect(res.body.status).toBe(String(row.status));
          expect(res.body.scimType).toBe(row.scimType);
          break;
        case 'oauth':
          expect(res.headers['content-type']).toMatch(/^application\/json/);
          expect(res.headers['cache-control']).toBe('no-store');
          expect(res.body.error).toBe(row.oauthError);
          break;
      }
    } finally {
      spy.mockRestore();
    }
  });
});

describe('a deleted resource', () => {
  it('answers 410 with issue `deleted` on every FHIR router, and 410 without scimType on SCIM', async () => {
    for (const probe of probes) {
      const spy = rejectWith(probe, new NotFoundError('gone', { deleted: true }));
      try {
        const res = await probe.send();
        expect({ probe: probe.name, status: res.status }).toEqual({ probe: probe.name, status: 410 });
        if (probe.protocol === 'fhir') expect(res.body.issue[0].code).toBe('deleted');
        if (probe.protocol === 'scim') expect(res.body.scimType).toBeUndefined();
      } finally {
        spy.mockRestore();
      }
    }
  });
});

describe('docs/errors.md', () => {
  it('lists every code as ERROR_TABLE answers it (regenerate with npm run docs:errors)', () => {
    expect(errorTableCellsIn(fs.readFileSync(ERRORS_PAGE, 'utf8'))).toEqual(errorTableCells());
  });
});
