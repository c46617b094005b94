import { createServer, type Server } from 'node:http';
import type { Express } from 'express';
import request from 'supertest';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { JWT_BEARER_ASSERTION_TYPE } from '../../src/auth/client/client-assertion.js';
import { hashClientSecret } from '../../src/auth/client/client-secret.js';
import { failureLimiter, FailureLimitError } from '../../src/auth/client/failure-limiter.js';
import { tokenRouter } from '../../src/auth/token/token-router.js';
import { bearerAuth } from '../../src/auth/access/bearer-auth.js';
import type { NewClient, Storage } from '../../src/storage/types.js';
import { expectOAuthError } from '../helpers/protocol-errors.js';
import { authApp, TOKEN_URL } from './auth-app.js';
import { clientKey, signAssertion, type ClientKey } from './client-keys.js';
import { storageWithProjects } from './auth-storage.js';
import { PATIENCE_MS } from '../helpers/eventually.js';

// Every secret check goes through this wrapper of the real one, which counts checks in flight and
// can hold them until the test releases them.
const checks = vi.hoisted(() => ({
  calls: 0,
  inFlight: 0,
  maxInFlight: 0,
  held: undefined as Promise<void> | undefined,
}));
vi.mock('../../src/auth/client/client-secret.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/auth/client/client-secret.js')>();
  return {
    ...real,
    verifyClientSecret: async (secret: string, hash: string) => {
      checks.calls += 1;
      checks.inFlight += 1;
      checks.maxInFlight = Math.max(checks.maxInFlight, checks.inFlight);
      try {
        if (checks.held) await checks.held;
        return await real.verifyClientSecret(secret, hash);
      } finally {
        checks.inFlight -= 1;
      }
    },
  };
});

const SECRET = 'correct horse battery staple';
const ATTACKER = '203.0.113.66';
const CLIENT_HOST = '198.51.100.7';
let secretHash: string;
let es384: ClientKey;

beforeAll(async () => {
  [es384, secretHash] = await Promise.all([clientKey('ES384'), hashClientSecret(SECRET)]);
});

function newClient(id: string, extra: Partial<NewClient> = {}): NewClient {
  return { id, projectId: 'p1', name: id, scope: 'system/*.rs', admin: false, superAdmin: false, ...extra };
}

async function clients(): Promise<Storage> {
  const storage = await storageWithProjects('p1');
  await storage.createClient(newClient('secret-client', { secretHash }));
  await storage.createClient(newClient('jwt-client', { jwks: { keys: [{ ...es384.publicJwk }] } }));
  return storage;
}

let server: Server | undefined;
afterEach(async () => {
  checks.calls = 0;
  checks.maxInFlight = 0;
  checks.held = undefined;
  if (server) await new Promise((resolve) => server!.close(resolve));
  server = undefined;
});

/** One listening server for all of a test's requests; callers' addresses come from X-Forwarded-For. */
function serve(app: Express): Server {
  app.set('trust proxy', true);
  server = createServer(app).listen(0, '127.0.0.1');
  return server;
}

function secretForm(clientId: string, secret: string) {
  return { grant_type: 'client_credentials', client_id: clientId, client_secret: secret };
}

function token(target: Server, from: string, form: Record<string, string>) {
  return request(target).post('/oauth2/token').set('X-Forwarded-For', from).type('form').send(form);
}

async function assertionForm(clientId = 'jwt-client') {
  return {
    grant_type: 'client_credentials',
    client_assertion_type: JWT_BEARER_ASSERTION_TYPE,
    client_assertion: await signAssertion(es384, { clientId, aud: TOKEN_URL }),
  };
}

function statusCounts(responses: { status: number }[]): Record<number, number> {
  const counts: Record<number, number> = {};
  for (const { status } of responses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

function expectSlowDown(res: request.Response): void {
  expectOAuthError(res, 429, 'slow_down');
  expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
}

describe('token endpoint failure limits under concurrency', () => {
  it('lets at most N of M > N parallel wrong secrets for one client and address be checked (defaults)', async () => {
    const target = serve(authApp(await clients()));
    const answers = await Promise.all(
      Array.from({ length: 40 }, () => token(target, ATTACKER, secretForm('secret-client', 'wrong'))),
    );
    const counts = statusCounts(answers);
    expect(counts[401]).toBeLessThanOrEqual(10);
    expect(counts[429]).toBeGreaterThanOrEqual(30);
    expect((counts[401] ?? 0) + (counts[429] ?? 0)).toBe(40);
    for (const res of answers.filter((r) => r.status === 429)) expectSlowDown(res);
    expect(checks.calls).toBeLessThanOrEqual(10);
  });

  it('holds the per-address limit for parallel guesses spread over many client ids', async () => {
    const target = serve(authApp(await clients(), { token: { rateLimit: { maxFailuresPerAddress: 8 } } }));
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) => token(target, ATTACKER, secretForm(`guess-${i}`, 'wrong'))),
    );
    const counts = statusCounts(answers);
    expect(counts[401]).toBeLessThanOrEqual(8);
    expect((counts[401] ?? 0) + (counts[429] ?? 0)).toBe(30);
    for (const res of answers.filter((r) => r.status === 429)) expectSlowDown(res);
    // Every kind of authentication from that address is now refused, a signed assertion included.
    expectSlowDown(await token(target, ATTACKER, await assertionForm()));
  });

  it('never locks the real client out from another address', async () => {
    const target = serve(authApp(await clients()));
    await Promise.all(
      Array.from({ length: 25 }, () => token(target, ATTACKER, secretForm('secret-client', 'wrong'))),
    );
    expectSlowDown(await token(target, ATTACKER, secretForm('secret-client', SECRET)));

    const post = await token(target, CLIENT_HOST, secretForm('secret-client', SECRET));
    expect(post.status).toBe(200);
    const basic = await request(target)
      .post('/oauth2/token')
      .set('X-Forwarded-For', CLIENT_HOST)
      .auth('secret-client', SECRET)
      .type('form')
      .send({ grant_type: 'client_credentials' });
    expect(basic.status).toBe(200);
    // Another client from the attacker's address is not held back by that client's counter.
    expect((await token(target, ATTACKER, await assertionForm())).status).toBe(200);
  });

  it('does not hold a private_key_jwt client back after secret guesses against its id', async () => {
    const target = serve(authApp(await clients()));
    await Promise.all(
      Array.from({ length: 25 }, () => token(target, ATTACKER, secretForm('jwt-client', 'wrong'))),
    );
    expect((await token(target, CLIENT_HOST, await assertionForm())).status).toBe(200);
    // Only the per-address counter applies to assertions, and it is not exhausted yet.
    expect((await token(target, ATTACKER, await assertionForm())).status).toBe(200);
  });

  it('never refuses parallel valid secrets from an address that has not failed', async () => {
    const target = serve(
      authApp(await clients(), {
        token: { rateLimit: { maxFailuresPerClientAddress: 2, maxFailuresPerAddress: 3 } },
      }),
    );
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => token(target, CLIENT_HOST, secretForm('secret-client', SECRET))),
    );
    expect(answers.map((r) => r.status)).toEqual(Array.from({ length: 12 }, () => 200));
  });

  it('caps the secret checks in flight', async () => {
    const target = serve(
      authApp(await clients(), {
        token: { rateLimit: { maxConcurrentSecretChecks: 2, maxQueuedSecretChecks: 100 } },
      }),
    );
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        token(target, `192.0.2.${i + 1}`, secretForm('secret-client', i % 3 === 0 ? SECRET : 'wrong')),
      ),
    );
    expect(statusCounts(answers)).toEqual({ 200: 4, 401: 8 });
    expect(checks.calls).toBe(12);
    expect(checks.maxInFlight).toBeLessThanOrEqual(2);
  });

  it('answers 503 temporarily_unavailable with Retry-After when the secret-check queue is full', async () => {
    const target = serve(
      authApp(await clients(), {
        token: {
          rateLimit: { maxConcurrentSecretChecks: 1, maxQueuedSecretChecks: 2, maxFailuresPerAddress: 1 },
        },
      }),
    );
    let release!: () => void;
    checks.held = new Promise((resolve) => (release = resolve));
    const addresses = Array.from({ length: 6 }, (_, i) => `192.0.2.${i + 1}`);
    const done: request.Response[] = [];
    const pending = addresses.map((from) =>
      token(target, from, secretForm('secret-client', 'wrong')).then((res) => {
        done.push(res);
        return res;
      }),
    );
    // One check runs (held), two wait, three are turned away at once.
    await vi.waitFor(() => expect(done).toHaveLength(3), { timeout: PATIENCE_MS });
    for (const res of done) {
      expect([res.status, res.body.error]).toEqual([503, 'temporarily_unavailable']);
      expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
    }
    expect(checks.maxInFlight).toBe(1);
    release();
    const answers = await Promise.all(pending);
    expect(statusCounts(answers)).toEqual({ 401: 3, 503: 3 });
    expect(checks.maxInFlight).toBe(1);
    // A turned-away request is no failure: its address may still authenticate (limit 1 per address).
    for (const [i, from] of addresses.entries()) {
      const retry = await token(target, from, secretForm('secret-client', SECRET));
      expect(retry.status).toBe(answers[i]!.status === 503 ? 200 : 429);
    }
  });

  it('keeps rateLimit: false disabling the limits', async () => {
    const target = serve(authApp(await clients(), { token: { rateLimit: false } }));
    const answers = await Promise.all(
      Array.from({ length: 15 }, () => token(target, ATTACKER, secretForm('secret-client', 'wrong'))),
    );
    expect(statusCounts(answers)).toEqual({ 401: 15 });
    expect((await token(target, ATTACKER, secretForm('secret-client', SECRET))).status).toBe(200);
  });
});

describe('bearerAuth Basic failure limits under concurrency', () => {
  it('checks at most N parallel wrong secrets and never locks the client out from another address', async () => {
    const target = serve(
      authApp(await clients(), {
        bearer: { allowBasic: true, rateLimit: { maxFailuresPerClientAddress: 3 } },
      }),
    );
    const get = (from: string, secret: string) =>
      request(target).get('/fhir/R4/Patient').set('X-Forwarded-For', from).auth('secret-client', secret);
    const answers = await Promise.all(Array.from({ length: 12 }, () => get(ATTACKER, 'wrong')));
    const counts = statusCounts(answers);
    expect(counts[401]).toBeLessThanOrEqual(3);
    expect((counts[401] ?? 0) + (counts[429] ?? 0)).toBe(12);
    for (const res of answers.filter((r) => r.status === 429)) {
      expect(res.body.issue[0].code).toBe('throttled');
      expect(Number(res.headers['retry-after'])).toBeGreaterThan(0);
    }
    expect((await get(ATTACKER, SECRET)).status).toBe(429);
    expect((await get(CLIENT_HOST, SECRET)).status).toBe(200);
  });
});

describe('failureLimiter', () => {
  it('lets an attempt wait while the last places are held by attempts still being checked', async () => {
    const limiter = failureLimiter({ maxFailuresPerClientAddress: 2 });
    const first = await limiter.begin('a', 'c');
    const second = await limiter.begin('a', 'c');
    let third: Awaited<ReturnType<typeof limiter.begin>> | undefined;
    const waiting = limiter.begin('a', 'c').then((attempt) => (third = attempt));
    await Promise.resolve();
    expect(third).toBeUndefined();
    await first.end(false); // a success gives its place back
    await waiting;
    expect(third).toBeDefined();
    await second.end(true);
    await third!.end(true);
    await expect(limiter.begin('a', 'c')).rejects.toMatchObject({ reason: 'too-many-failures' });
    // Another address, and the address alone (an assertion), are not affected.
    await (await limiter.begin('b', 'c')).end(false);
    await (await limiter.begin('a')).end(false);
  });

  it('refuses waiting attempts once the pending ones fail, and forgets failures after the window', async () => {
    let time = 1_000_000;
    const limiter = failureLimiter({ maxFailuresPerAddress: 1, windowSeconds: 60 }, { now: () => time });
    const first = await limiter.begin('a');
    const waiting = limiter.begin('a');
    await first.end(true);
    const refused = await waiting.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(FailureLimitError);
    expect(refused).toMatchObject({ reason: 'too-many-failures', retryAfterSeconds: 60 });
    await expect(limiter.recordFailure('a')).rejects.toThrow(FailureLimitError);
    time += 60_000;
    await (await limiter.begin('a')).end(false);
  });

  it('validates its options when the router is created', async () => {
    const storage = await clients();
    expect(() => tokenRouter({ storage, rateLimit: { maxFailuresPerAddress: 0 } })).toThrow(
      /tokenRouter: rateLimit.maxFailuresPerAddress/,
    );
    expect(() => tokenRouter({ storage, rateLimit: { windowSeconds: 1.5 } })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() => tokenRouter({ storage, rateLimit: { maxQueuedSecretChecks: -1 } })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
    expect(() => tokenRouter({ storage, rateLimit: { maxQueuedSecretChecks: 0 } })).not.toThrow();
    expect(() =>
      tokenRouter({ storage, rateLimit: { maxFailuresPerClient: 5 } as Record<string, number> }),
    ).toThrow(/maxFailuresPerClientAddress/);
    expect(() => bearerAuth({ storage, rateLimit: { maxConcurrentSecretChecks: 0 } })).toThrow(
      /bearerAuth: rateLimit.maxConcurrentSecretChecks/,
    );
  });
});
