import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { describe, expect, it, vi } from 'vitest';
import { createAuditTrail } from '../../src/audit/trail.js';
import { readConfig } from '../../src/cli/serve-config.js';
import { startStandalone } from '../../src/cli/standalone.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import { clientKey, signAssertion } from '../auth/client-keys.js';
import { eventually } from '../helpers/eventually.js';
import { sleep } from '../helpers/sleep.js';
import { tempDir } from '../helpers/temp-dir.js';

/** A pid of no process: a child that has exited (and been reaped). */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

/** stdout as JSON log lines; every line must be JSON. */
function logLines(text: string): Record<string, unknown>[] {
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

/**
 * `serve` (`argv` after `node`) in a child process of the repository, on 127.0.0.1:`port`, with the
 * super-admin client `root` / `root-secret-123` and `env` added; stdout and stderr piped.
 */
function spawnServe(argv: string[], port: number, env: Record<string, string>) {
  return spawn(process.execPath, argv, {
    cwd: path.resolve(import.meta.dirname, '../..'),
    // (vitest sets BASE_URL to '/', which serve would refuse.)
    env: {
      ...process.env,
      BASE_URL: '',
      PORT: String(port),
      HOST: '127.0.0.1',
      SUPER_ADMIN_CLIENT_ID: 'root',
      SUPER_ADMIN_CLIENT_SECRET: 'root-secret-123',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

async function tokenStatus(baseUrl: string, id: string, secret: string): Promise<number> {
  const res = await fetch(`${baseUrl}/oauth2/token`, {
    method: 'POST',
    headers: {
      Authorization: `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`,
      'Content-Type': 'application/x-www-form-urlencoded',
    },
    body: 'grant_type=client_credentials',
  });
  return res.status;
}

describe('serve: configuration', () => {
  it('reads defaults and rejects bad values', () => {
    const config = readConfig({});
    expect(config.port).toBe(8103);
    expect(config.baseUrl).toBe('http://localhost:8103');
    expect(readConfig({ PORT: '9000', BASE_URL: 'https://fhir.example.org/' }).baseUrl).toBe(
      'https://fhir.example.org',
    );
    expect(() => readConfig({ PORT: 'abc' })).toThrow(/PORT/);
    expect(() => readConfig({ BASE_URL: 'not a url' })).toThrow(/BASE_URL/);
    expect(() => readConfig({ SUPER_ADMIN_CLIENT_ID: 'x' })).toThrow(/SUPER_ADMIN/);
    expect(config.bulkRequireAsyncHeaders).toBe(false);
    expect(readConfig({ BULK_REQUIRE_ASYNC_HEADERS: 'true' }).bulkRequireAsyncHeaders).toBe(true);
    expect(readConfig({ BULK_REQUIRE_ASYNC_HEADERS: 'false' }).bulkRequireAsyncHeaders).toBe(false);
    expect(() => readConfig({ BULK_REQUIRE_ASYNC_HEADERS: 'yes' })).toThrow(/BULK_REQUIRE_ASYNC_HEADERS/);
    expect(config.fhirDefaultReturn).toBe('representation');
    expect(readConfig({ FHIR_DEFAULT_RETURN: 'Minimal' }).fhirDefaultReturn).toBe('minimal');
    expect(() => readConfig({ FHIR_DEFAULT_RETURN: 'OperationOutcome' })).toThrow(/FHIR_DEFAULT_RETURN/);
    expect(config.fhirMaxPatchOperations).toBe(1000);
    expect(readConfig({ FHIR_MAX_PATCH_OPERATIONS: '50' }).fhirMaxPatchOperations).toBe(50);
    expect(() => readConfig({ FHIR_MAX_PATCH_OPERATIONS: '0' })).toThrow(/FHIR_MAX_PATCH_OPERATIONS/);
    expect(config.fhirMaxPatchedResourceSize).toBe(32 * 1024 * 1024);
    expect(readConfig({ FHIR_MAX_PATCHED_RESOURCE_SIZE: '1mb' }).fhirMaxPatchedResourceSize).toBe(
      1024 * 1024,
    );
    expect(() => readConfig({ FHIR_MAX_PATCHED_RESOURCE_SIZE: 'Infinity' })).toThrow(
      /FHIR_MAX_PATCHED_RESOURCE_SIZE/,
    );
    expect(config.maxConnectionsPerAddress).toBe(128);
    expect(readConfig({ MAX_CONNECTIONS_PER_ADDRESS: '16' }).maxConnectionsPerAddress).toBe(16);
    expect(readConfig({ MAX_CONNECTIONS_PER_ADDRESS: 'Infinity' }).maxConnectionsPerAddress).toBe(Infinity);
    expect(() => readConfig({ MAX_CONNECTIONS_PER_ADDRESS: '0' })).toThrow(/MAX_CONNECTIONS_PER_ADDRESS/);
    expect(config.backupDir).toBeUndefined();
    expect(readConfig({ BACKUP_DIR: 'backups' }).backupDir).toBe(path.resolve('backups'));
    expect(() => readConfig({ BACKUP_DIR: 'backups', DATABASE_URL: 'postgres://x/y' })).toThrow(/BACKUP_DIR/);
  });

  it('reads ALLOW_PRIVATE_JWKS_ADDRESSES (unset: the library default)', () => {
    expect(readConfig({}).allowPrivateJwksAddresses).toBeUndefined();
    expect(readConfig({ ALLOW_PRIVATE_JWKS_ADDRESSES: 'true' }).allowPrivateJwksAddresses).toBe(true);
    expect(readConfig({ ALLOW_PRIVATE_JWKS_ADDRESSES: 'FALSE' }).allowPrivateJwksAddresses).toBe(false);
    expect(() => readConfig({ ALLOW_PRIVATE_JWKS_ADDRESSES: 'yes' })).toThrow(/ALLOW_PRIVATE_JWKS_ADDRESSES/);
  });

  it("reads the identity providers' key settings", () => {
    expect(readConfig({})).toMatchObject({
      idpJwksTimeoutMs: 5000,
      idpJwksMaxBytes: 65536,
      idpJwksCacheMaxAgeMs: 600000,
      idpJwksCooldownMs: 30000,
    });
    expect(readConfig({}).allowPrivateIdpJwksAddresses).toBeUndefined();
    expect(readConfig({ IDP_JWKS_MAX_BYTES: '128kb' }).idpJwksMaxBytes).toBe(128 * 1024);
    expect(readConfig({ ALLOW_PRIVATE_IDP_JWKS_ADDRESSES: 'TRUE' }).allowPrivateIdpJwksAddresses).toBe(true);
    for (const [name, bad] of [
      ['IDP_JWKS_TIMEOUT_MS', '0'],
      ['IDP_JWKS_MAX_BYTES', 'Infinity'],
      ['IDP_JWKS_CACHE_MAX_AGE_MS', '-1'],
      ['IDP_JWKS_COOLDOWN_MS', 'soon'],
      ['ALLOW_PRIVATE_IDP_JWKS_ADDRESSES', 'yes'],
    ] as const) {
      expect(() => readConfig({ [name]: bad }), name).toThrow(new RegExp(name));
    }
  });

  it('reads the SCIM settings for identity providers', () => {
    expect(readConfig({})).toMatchObject({ scimEchoUserName: false });
    expect(readConfig({}).scimDefaultUserType).toBeUndefined();
    expect(
      readConfig({ SCIM_DEFAULT_USER_TYPE: 'relatedperson', SCIM_ECHO_USER_NAME: 'TRUE' }),
    ).toMatchObject({
      scimDefaultUserType: 'RelatedPerson',
      scimEchoUserName: true,
    });
    expect(readConfig({ SCIM_ECHO_USER_NAME: 'false' }).scimEchoUserName).toBe(false);
    expect(() => readConfig({ SCIM_DEFAULT_USER_TYPE: 'Doctor' })).toThrow(/SCIM_DEFAULT_USER_TYPE/);
    expect(() => readConfig({ SCIM_ECHO_USER_NAME: 'yes' })).toThrow(/SCIM_ECHO_USER_NAME/);
  });
});

describe('serve: the standalone server', () => {
  it('generates super-admin credentials once, serves tokens, and keeps data across restarts', async () => {
    const dataDir = tempDir('fpk-standalone-');
    const port = await freePort();
    const config = readConfig({ PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir });
    const first = await startStandalone(config);
    try {
      expect(first.generatedSuperAdmin?.clientId).toBe('super-admin');
      expect(await tokenStatus(first.baseUrl, 'super-admin', first.generatedSuperAdmin!.clientSecret)).toBe(
        200,
      );
      expect(await tokenStatus(first.baseUrl, 'super-admin', 'wrong')).toBe(401);
    } finally {
      await first.close();
    }
    const second = await startStandalone(config);
    try {
      expect(second.generatedSuperAdmin).toBeUndefined();
      expect(await tokenStatus(second.baseUrl, 'super-admin', first.generatedSuperAdmin!.clientSecret)).toBe(
        200,
      );
    } finally {
      await second.close();
    }
  });

  it('ALLOW_PRIVATE_JWKS_ADDRESSES decides whether a loopback jwksUri is registered ($new-client) and fetched (token endpoint)', async () => {
    const key = await clientKey('ES384');
    let fetches = 0;
    const jwksServer = createServer((_req, res) => {
      fetches += 1;
      res
        .writeHead(200, { 'Content-Type': 'application/json' })
        .end(JSON.stringify({ keys: [key.publicJwk] }));
    });
    jwksServer.listen(0, '127.0.0.1');
    await once(jwksServer, 'listening');
    const jwksUri = `http://127.0.0.1:${(jwksServer.address() as net.AddressInfo).port}/jwks.json`;
    // Under production, where the default refuses them: the setting decides either way.
    vi.stubEnv('NODE_ENV', 'production');
    try {
      for (const allow of [false, true]) {
        const standalone = await startStandalone(
          readConfig({
            PORT: String(await freePort()),
            HOST: '127.0.0.1',
            DATA_DIR: tempDir('fpk-standalone-'),
            ALLOW_PRIVATE_JWKS_ADDRESSES: String(allow),
          }),
        );
        try {
          const base = standalone.baseUrl;
          const tokenRes = await fetch(`${base}/oauth2/token`, {
            method: 'POST',
            headers: {
              Authorization: `Basic ${Buffer.from(`super-admin:${standalone.generatedSuperAdmin!.clientSecret}`).toString('base64')}`,
              'Content-Type': 'application/x-www-form-urlencoded',
            },
            body: 'grant_type=client_credentials',
          });
          const { access_token: token } = (await tokenRes.json()) as { access_token: string };
          const operation = (path: string, parameter: unknown[]) =>
            fetch(`${base}/fhir/R4${path}`, {
              method: 'POST',
              headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/fhir+json' },
              body: JSON.stringify({ resourceType: 'Parameters', parameter }),
            });
          const project = (await (
            await operation('/Project/$init', [{ name: 'name', valueString: 'P' }])
          ).json()) as { id: string };
          const registered = await operation(`/Project/${project.id}/$new-client`, [
            { name: 'name', valueString: 'loopback' },
            { name: 'jwksUri', valueUri: jwksUri },
          ]);
          expect(registered.status).toBe(allow ? 201 : 400);
          // A client stored before (or by other means) is checked when its keys are fetched.
          await standalone.storage.createClient({
            id: 'stored',
            projectId: project.id,
            name: 'stored',
            scope: 'system/*.rs',
            admin: false,
            superAdmin: false,
            jwksUri,
          });
          const assertion = await signAssertion(key, { clientId: 'stored', aud: `${base}/oauth2/token` });
          const answer = await fetch(`${base}/oauth2/token`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
            body: new URLSearchParams({
              grant_type: 'client_credentials',
              client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
              client_assertion: assertion,
            }),
          });
          expect([answer.status, ((await answer.json()) as { error?: string }).error]).toEqual(
            allow ? [200, undefined] : [401, 'invalid_client'],
          );
          expect(fetches).toBe(allow ? 1 : 0);
        } finally {
          await standalone.close();
        }
      }
    } finally {
      vi.unstubAllEnvs();
      jwksServer.close();
    }
  });

  it('answers JSON for unrouted paths and oversized URLs, and bounds slow requests', async () => {
    const standalone = await startStandalone(
      readConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: tempDir('fpk-standalone-') }),
    );
    try {
      const base = `http://127.0.0.1:${(standalone.server.address() as net.AddressInfo).port}`;
      const unrouted = await fetch(`${base}/no/such/path`);
      expect(unrouted.status).toBe(404);
      expect(unrouted.headers.get('content-type')).toMatch(/json/);
      expect(((await unrouted.json()) as { resourceType: string }).resourceType).toBe('OperationOutcome');
      const long = await fetch(`${base}/fhir/R4/Patient?name=${'x'.repeat(20_000)}`);
      expect(long.status).toBe(431);
      expect(((await long.json()) as { resourceType: string }).resourceType).toBe('OperationOutcome');
      expect(standalone.server.headersTimeout).toBeLessThanOrEqual(60_000);
      expect(standalone.server.requestTimeout).toBeLessThanOrEqual(120_000);
    } finally {
      await standalone.close();
    }
  });

  it('answers errors no router answers in the protocol of the path: SCIM under /scim/v2, OAuth at /oauth2', async () => {
    const standalone = await startStandalone(
      readConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: tempDir('fpk-standalone-') }),
    );
    try {
      const base = `http://127.0.0.1:${(standalone.server.address() as net.AddressInfo).port}`;
      const answer = async (res: Response) => ({
        status: res.status,
        type: res.headers.get('content-type'),
        body: (await res.json()) as Record<string, unknown>,
      });
      // Over Node's 16 KB header limit: refused by its parser before any router sees it.
      const parens = '('.repeat(20_000);
      expect(await answer(await fetch(`${base}/scim/v2/Users?filter=${parens}`))).toMatchObject({
        status: 431,
        type: expect.stringMatching(/^application\/scim\+json/),
        body: { schemas: ['urn:ietf:params:scim:api:messages:2.0:Error'], status: '431' },
      });
      expect(await answer(await fetch(`${base}/fhir/R4/Patient?name=${parens}`))).toMatchObject({
        status: 431,
        type: expect.stringMatching(/^application\/fhir\+json/),
        body: { resourceType: 'OperationOutcome' },
      });
      expect(
        await answer(await fetch(`${base}/oauth2/token?${'a'.repeat(20_000)}`, { method: 'POST' })),
      ).toMatchObject({
        status: 431,
        type: expect.stringMatching(/^application\/json/),
        body: { error: 'invalid_request' },
      });
      // No route: under the token endpoint and the JWKS, OAuth; elsewhere, FHIR.
      expect(await answer(await fetch(`${base}/oauth2/token/more`, { method: 'POST' }))).toMatchObject({
        status: 404,
        type: expect.stringMatching(/^application\/json/),
        body: { error: 'invalid_request' },
      });
      expect(await answer(await fetch(`${base}/oauth2/jwks`, { method: 'POST' }))).toMatchObject({
        status: 404,
        body: { error: 'invalid_request' },
      });
      expect(await answer(await fetch(`${base}/scim/v2x`))).toMatchObject({
        status: 404,
        body: { resourceType: 'OperationOutcome' },
      });
    } finally {
      await standalone.close();
    }
  });

  it('provisions SCIM users without userType and echoes userName with the SCIM_* settings, answers FHIR writes minimally with FHIR_DEFAULT_RETURN, and bounds patches with FHIR_MAX_PATCH_*', async () => {
    const standalone = await startStandalone(
      readConfig({
        PORT: '0',
        HOST: '127.0.0.1',
        DATA_DIR: tempDir('fpk-standalone-'),
        SCIM_DEFAULT_USER_TYPE: 'Practitioner',
        SCIM_ECHO_USER_NAME: 'true',
        FHIR_DEFAULT_RETURN: 'minimal',
        FHIR_MAX_PATCH_OPERATIONS: '2',
        FHIR_MAX_PATCHED_RESOURCE_SIZE: '4kb',
      }),
    );
    try {
      const base = `http://127.0.0.1:${(standalone.server.address() as net.AddressInfo).port}`;
      const basic = (id: string, secret: string) =>
        `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`;
      const tokenRes = await fetch(`${base}/oauth2/token`, {
        method: 'POST',
        headers: {
          Authorization: basic('super-admin', standalone.generatedSuperAdmin!.clientSecret),
          'Content-Type': 'application/x-www-form-urlencoded',
        },
        body: 'grant_type=client_credentials',
      });
      const { access_token: token } = (await tokenRes.json()) as { access_token: string };
      const operation = async (path: string, parameter: unknown[]) => {
        const res = await fetch(`${base}/fhir/R4${path}`, {
          method: 'POST',
          headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/fhir+json' },
          body: JSON.stringify({ resourceType: 'Parameters', parameter }),
        });
        expect(res.status).toBe(201);
        return (await res.json()) as { id: string; secret: string };
      };
      const project = await operation('/Project/$init', [{ name: 'name', valueString: 'IdP' }]);
      const client = await operation(`/Project/${project.id}/$new-client`, [
        { name: 'name', valueString: 'Entra' },
        { name: 'admin', valueBoolean: true },
      ]);
      const created = await fetch(`${base}/scim/v2/Users`, {
        method: 'POST',
        headers: { Authorization: basic(client.id, client.secret), 'Content-Type': 'application/scim+json' },
        body: JSON.stringify({ userName: 'ann@idp.example', name: { givenName: 'Ann' } }),
      });
      expect(created.status).toBe(201);
      const user = (await created.json()) as { id: string; userName: string; userType: string };
      expect(user).toMatchObject({ userName: 'ann@idp.example', userType: 'Practitioner' });
      expect((await standalone.storage.readUser(project.id, user.id)).userType).toBe('Practitioner');

      const projectToken = await fetch(`${base}/oauth2/token`, {
        method: 'POST',
        headers: {
          Authorization: basic(client.id, client.secret),
          'Content-Type': 'application/x-www-form-urlencoded',
        },
        body: 'grant_type=client_credentials',
      });
      const { access_token: fhirToken } = (await projectToken.json()) as { access_token: string };
      const write = await fetch(`${base}/fhir/R4/Patient`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${fhirToken}`, 'Content-Type': 'application/fhir+json' },
        body: JSON.stringify({ resourceType: 'Patient', active: true }),
      });
      expect(write.status).toBe(201);
      expect(write.headers.get('location')).toMatch(/\/fhir\/R4\/Patient\/[^/]+\/_history\/1$/);
      expect(await write.text()).toBe('');

      const id = /\/Patient\/([^/]+)\//.exec(write.headers.get('location')!)![1]!;
      const patch = (operations: unknown[]) =>
        fetch(`${base}/fhir/R4/Patient/${id}`, {
          method: 'PATCH',
          headers: { Authorization: `Bearer ${fhirToken}`, 'Content-Type': 'application/json-patch+json' },
          body: JSON.stringify(operations),
        });
      const gender = { op: 'add', path: '/gender', value: 'female' };
      const tooMany = await patch([gender, gender, gender]);
      expect(tooMany.status).toBe(413);
      expect(JSON.stringify(await tooMany.json())).toContain('maxPatchOperations');
      const tooLarge = await patch([gender, { op: 'add', path: '/id2', value: 'x'.repeat(5000) }]);
      expect(tooLarge.status).toBe(413);
      expect(JSON.stringify(await tooLarge.json())).toContain('(operation 1)');
      expect((await patch([gender, gender])).status).toBe(200);
    } finally {
      await standalone.close();
    }
  });

  it('exits 1 with one line on stderr when its data directory cannot be written', async () => {
    // A path through a regular file cannot be created, even by root (who passes permission checks).
    const file = path.join(tempDir('fpk-standalone-'), 'file');
    fs.writeFileSync(file, '');
    const dataDir = path.join(file, 'data');
    await expect(startStandalone(readConfig({ PORT: '0', DATA_DIR: dataDir }))).rejects.toMatchObject({
      code: 'ERR_STORAGE_UNAVAILABLE',
    });
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', 'src/cli/main.ts', 'serve', '--log-level', 'silent'],
      {
        cwd: path.resolve(import.meta.dirname, '../..'),
        // (vitest sets BASE_URL to '/', which serve would refuse.)
        env: { ...process.env, BASE_URL: '', PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    expect(code).toBe(1);
    expect(stderr.split('\n').filter((line) => line !== '')).toEqual([
      expect.stringMatching(/^fhir-platform-kit: Cannot open the file store in .*: ENOTDIR/),
    ]);
    expect(stderr).toContain(path.join(dataDir, 'store'));
  });

  it.each([
    // Exactly what `npm start` runs, and the built bin the package installs.
    ['`npm start` (tsx, the source)', ['--import', 'tsx', 'src/cli/main.ts', 'serve']],
    ['the built bin', ['dist/cli.js', 'serve']],
  ])('runs as %s and shuts down cleanly on SIGTERM', async (_name, argv) => {
    const dataDir = tempDir('fpk-standalone-');
    const port = await freePort();
    const child = spawnServe(argv, port, { DATA_DIR: dataDir });
    let output = '';
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await eventually('the "listening" line', () => output.includes('"listening"'), { intervalMs: 100 });
      // JSON log lines (pino) on stdout.
      const listening = logLines(stdout).find((line) => line.msg === 'listening');
      expect(listening).toMatchObject({ level: 30, fhir: `http://localhost:${port}/fhir/R4` });
      expect(output).not.toContain('SUPER_ADMIN_CLIENT_SECRET=');
      expect(await tokenStatus(`http://127.0.0.1:${port}`, 'root', 'root-secret-123')).toBe(200);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    const messages = logLines(stdout).map((line) => line.msg);
    expect(messages).toEqual([
      'starting the standalone server',
      'listening',
      'request',
      'shutting down',
      'stopped',
    ]);
    // One request line for the token request: method, path and status, never the secret.
    expect(logLines(stdout).find((line) => line.msg === 'request')).toMatchObject({
      method: 'POST',
      path: '/oauth2/token',
      status: 200,
    });
    expect(stdout).not.toContain('root-secret-123');
    expect(logLines(stdout).find((line) => line.msg === 'shutting down')?.signal).toBe('SIGTERM');
    // The lock was released: the store opens again at once.
    const again = await startStandalone(readConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir }));
    await again.close();
  });

  it('writes a backup of the running file store on SIGUSR2 (BACKUP_DIR), which opens as a store', async () => {
    const dataDir = tempDir('fpk-standalone-');
    const backupDir = path.join(tempDir('fpk-standalone-'), 'backups');
    // What a serve killed mid-backup leaves: a temporary directory named for its (gone) process.
    const stale = path.join(backupDir, `.backup-2020-01-01T00-00-00-000Z.tmp-${deadPid()}-${randomUUID()}`);
    fs.mkdirSync(path.join(stale, 'projects'), { recursive: true });
    const port = await freePort();
    const child = spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], port, {
      DATA_DIR: dataDir,
      BACKUP_DIR: backupDir,
    });
    let stdout = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const waitFor = (msg: string): Promise<Record<string, unknown>> =>
      eventually(
        `the "${msg}" line`,
        () => (stdout.includes(`"${msg}"`) ? logLines(stdout).find((l) => l.msg === msg) : undefined),
        { intervalMs: 100 },
      );
    try {
      expect(await waitFor('listening')).toBeDefined();
      // Removed on start, before any SIGUSR2.
      expect(await waitFor('stale backup directory removed')).toMatchObject({ level: 30, dir: stale });
      expect(fs.existsSync(stale)).toBe(false);
      child.kill('SIGUSR2');
      const written = await waitFor('backup written');
      expect(written).toMatchObject({ level: 30, dir: expect.stringContaining(backupDir) });
      // The server still serves after it.
      expect(await tokenStatus(`http://127.0.0.1:${port}`, 'root', 'root-secret-123')).toBe(200);
      const [name] = fs.readdirSync(backupDir);
      expect(name).toMatch(/^backup-\d{4}-\d\d-\d\dT/);
      const copy = await fileStorage({ dir: path.join(backupDir, name!) });
      try {
        expect(await copy.readClient('root')).toMatchObject({ superAdmin: true });
      } finally {
        await copy.close();
      }
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    expect(logLines(stdout).map((line) => line.msg)).toContain('backup started');
  });
});

/** Resolves once `child` has printed `text` on stdout; rejects if it exits first. */
function printed(child: ReturnType<typeof spawnServe>, text: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    const onData = (chunk: Buffer): void => {
      stdout += chunk.toString();
      if (stdout.includes(text)) {
        child.stdout.off('data', onData);
        resolve();
      }
    };
    child.stdout.on('data', onData);
    child.once('exit', (code) => reject(new Error(`serve exited (${code}) before printing ${text}`)));
  });
}

/** Collects a spawned serve's output and exit code. */
function watch(child: ReturnType<typeof spawnServe>) {
  const run = { stdout: '', stderr: '' };
  child.stdout.on('data', (chunk: Buffer) => (run.stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (run.stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitFor = (text: string): Promise<boolean> =>
    eventually(`${text} on stdout`, () => run.stdout.includes(text), { intervalMs: 100 });
  return { run, exited, waitFor, process: child };
}

describe('serve: a start that fails', () => {
  it('on a port in use: exit 1 with a clear line, no credentials created; the next start prints the secret', async () => {
    const dataDir = tempDir('fpk-standalone-');
    const blocker = net.createServer().listen(0, '127.0.0.1');
    await new Promise((resolve) => blocker.once('listening', resolve));
    const port = (blocker.address() as net.AddressInfo).port;
    // No SUPER_ADMIN_* variables: the server generates the client and shows its secret once.
    const none = { DATA_DIR: dataDir, SUPER_ADMIN_CLIENT_ID: '', SUPER_ADMIN_CLIENT_SECRET: '' };
    const first = watch(spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], port, none));
    expect(await first.exited).toBe(1);
    await new Promise((resolve) => blocker.close(resolve));
    expect(first.run.stderr.split('\n').filter((line) => line !== '')).toEqual([
      expect.stringMatching(
        /^fhir-platform-kit: Cannot listen on 127\.0\.0\.1:\d+: the port is in use.*PORT \(--port\)/,
      ),
    ]);
    // The platform stopped before the store closed under it.
    expect(`${first.run.stdout}${first.run.stderr}`).not.toMatch(/storage is closed/i);
    expect(first.run.stderr).not.toContain('SUPER_ADMIN_CLIENT_SECRET=');

    const second = watch(spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], port, none));
    try {
      expect(await second.waitFor('"listening"')).toBe(true);
      await eventually('the generated secret', () => second.run.stderr.includes('SECRET='), {
        intervalMs: 100,
      });
      const secret = /SUPER_ADMIN_CLIENT_SECRET=(\S+)/.exec(second.run.stderr)?.[1];
      expect(secret).toBeDefined();
      expect(await tokenStatus(`http://127.0.0.1:${port}`, 'super-admin', secret!)).toBe(200);
    } finally {
      second.process.kill('SIGTERM');
    }
    expect(await second.exited).toBe(0);
  });

  it('on a database it cannot reach: its error logged once, with its type and message, and one line on stderr', async () => {
    const closed = await freePort(); // nothing listens there
    const serve = watch(
      spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], await freePort(), {
        DATA_DIR: tempDir('fpk-standalone-'),
        DATABASE_URL: `postgres://127.0.0.1:${closed}/none`,
      }),
    );
    expect(await serve.exited).toBe(1);
    const errors = logLines(serve.run.stdout).filter((line) => line.level === 50);
    // Once (the export jobs' resume and their sweep both logged it), described as an error: pino
    // named a plain object's type "Object".
    expect(errors, serve.run.stdout).toHaveLength(1);
    expect(errors[0]!.err).toMatchObject({
      type: 'StorageUnavailableError',
      code: 'ERR_STORAGE_UNAVAILABLE',
      message: expect.stringContaining('ECONNREFUSED'),
    });
    expect(serve.run.stderr.split('\n').filter((line) => line !== '')).toEqual([
      expect.stringMatching(/^fhir-platform-kit: The database is unavailable: connect ECONNREFUSED/),
    ]);
  });

  it('on a DATA_DIR another server uses: exit 1, saying that each instance needs its own DATA_DIR', async () => {
    const dataDir = tempDir('fpk-standalone-');
    const first = watch(
      spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], await freePort(), { DATA_DIR: dataDir }),
    );
    try {
      await printed(first.process, '"listening"');
      const second = watch(
        spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], await freePort(), { DATA_DIR: dataDir }),
      );
      expect(await second.exited).toBe(1);
      expect(second.run.stderr.split('\n').filter((line) => line !== '')).toEqual([
        expect.stringMatching(
          /^fhir-platform-kit: The storage directory .* is in use by process \d+: another process \(another server\?\) uses this DATA_DIR\. Stop it, or give each instance its own DATA_DIR \(--data-dir\)/,
        ),
      ]);
    } finally {
      first.process.kill('SIGTERM');
    }
    expect(await first.exited).toBe(0);
  });

  it('on a DATA_DIR whose audit journal another process holds, with PostgreSQL: each instance needs its own DATA_DIR, even on one DATABASE_URL', async () => {
    const dataDir = tempDir('fpk-standalone-');
    // What another instance keeps there whatever its store: the audit journal, locked while open.
    const other = createAuditTrail({
      storage: memoryStorage(),
      journalDir: path.join(dataDir, 'audit-journal'),
    });
    try {
      // The store connects lazily: the journal is refused before any connection.
      const config = readConfig({
        PORT: '0',
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        DATABASE_URL: `postgres://127.0.0.1:${await freePort()}/none`,
      });
      await expect(startStandalone(config)).rejects.toMatchObject({
        exitCode: 1,
        message: expect.stringMatching(
          /audit-journal is in use by process \d+: another process \(another server\?\) uses this DATA_DIR\. Each instance needs its own DATA_DIR \(--data-dir\), even instances sharing one DATABASE_URL$/,
        ),
      });
    } finally {
      await other.close();
    }
  });

  it.each([
    ['999.1.1.1', /the host name does not resolve.*HOST \(--host\)/],
    // TEST-NET-1 (RFC 5737): an address, but none of this machine's.
    ['192.0.2.1', /not an address of this machine.*HOST \(--host\)/],
  ])('on HOST=%s: a usage-level message naming HOST, and no credentials created', async (host, message) => {
    const dataDir = tempDir('fpk-standalone-');
    await expect(
      startStandalone(readConfig({ PORT: '0', HOST: host, DATA_DIR: dataDir })),
    ).rejects.toMatchObject({ exitCode: 1, message: expect.stringMatching(message) });
    // The store was closed (its lock released) and holds no super-admin client.
    const store = await fileStorage({ dir: path.join(dataDir, 'store') });
    try {
      await expect(store.readClient('super-admin')).rejects.toMatchObject({ code: 'ERR_STORAGE_NOT_FOUND' });
    } finally {
      await store.close();
    }
  });
});

describe('serve: stopping', () => {
  it('exits soon after SIGTERM with a request stuck mid-body (SHUTDOWN_TIMEOUT_MS=500)', async () => {
    const port = await freePort();
    const serve = watch(
      spawnServe(['--import', 'tsx', 'src/cli/main.ts', 'serve'], port, {
        DATA_DIR: tempDir('fpk-standalone-'),
        SHUTDOWN_TIMEOUT_MS: '500',
      }),
    );
    expect(await serve.waitFor('"listening"')).toBe(true);
    const tokenRes = await fetch(`http://127.0.0.1:${port}/oauth2/token`, {
      method: 'POST',
      headers: {
        Authorization: `Basic ${Buffer.from('root:root-secret-123').toString('base64')}`,
        'Content-Type': 'application/x-www-form-urlencoded',
      },
      body: 'grant_type=client_credentials',
    });
    const { access_token: token } = (await tokenRes.json()) as { access_token: string };
    // An authorised write whose headers announce 1000 bytes, then 10 of them: the request waits
    // for the rest of its body.
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((resolve) => socket.once('connect', resolve));
    socket.on('error', () => undefined);
    let answered = '';
    socket.on('data', (chunk: Buffer) => (answered += chunk.toString()));
    const cut = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.write(
      `POST /fhir/R4/Project/$init HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n` +
        'Content-Type: application/fhir+json\r\nContent-Length: 1000\r\n\r\n{"resource',
    );
    await sleep(300); // a while in which the half-sent request gets no answer
    expect(answered).toBe('');
    const signalled = Date.now();
    serve.process.kill('SIGTERM');
    expect(await serve.exited).toBe(0);
    // Well before the default 10 s, and before the server's own request timeout (120 s).
    expect(Date.now() - signalled).toBeLessThan(5000);
    await cut;
    expect(answered).toBe('');
    expect(logLines(serve.run.stdout).map((line) => line.msg)).toContain('stopped');
  });
});
