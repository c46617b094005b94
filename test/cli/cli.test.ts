import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import express from 'express';
import { exportJWK, generateKeyPair } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyClientSecret } from '../../src/auth/client/client-secret.js';
import { ensureSuperAdminClient } from '../../src/auth/client/super-admin.js';
import { fhirPlatform, type FhirPlatform } from '../../src/platform.js';
import { fileStorage } from '../../src/stores.js';
import type { Storage } from '../../src/storage/types.js';
import { parameters } from '../helpers/platform-app.js';
import { tempDir } from '../helpers/temp-dir.js';

const REPO = path.resolve(import.meta.dirname, '../..');
const ROOT = { id: 'root', secret: 'root-secret-0123456789' };

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the command line in a child process: from the TypeScript source through tsx (as `npm start`
 * does), or the built bin (`dist/cli.js`, what the package installs).
 */
function cli(args: string[], options: { dist?: boolean; env?: Record<string, string> } = {}): Promise<Run> {
  const argv = options.dist ? ['dist/cli.js', ...args] : ['--import', 'tsx', 'src/cli/main.ts', ...args];
  const child = spawn(process.execPath, argv, {
    cwd: REPO,
    env: { ...process.env, FPK_FHIR_URL: host.fhirUrl, ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

/** A port nothing listens on (it was free a moment ago). */
async function closedPort(): Promise<number> {
  const server = net.createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Runs and expects exit 0 with JSON on stdout. */
async function cliJson(
  args: string[],
  options?: Parameters<typeof cli>[1],
): Promise<ReturnType<typeof JSON.parse>> {
  const run = await cli(args, options);
  expect(run.code, run.stderr).toBe(0);
  return JSON.parse(run.stdout);
}

/**
 * The server: a host app mounting the platform under /api on a file store, with two test hooks in
 * front of it: `cutNextDownload` answers the next whole-file download with half of the file and
 * then drops the connection; `tamperNextManifest` adds one to the first `count` of the next manifest
 * or moves its first file to another origin.
 */
let host: {
  fhirUrl: string;
  dataDir: string;
  storage: Storage;
  platform: FhirPlatform;
  server: ReturnType<express.Express['listen']>;
  ranges: string[];
  cutNextDownload: boolean;
  tamperNextManifest: 'count' | 'origin' | undefined;
};

beforeAll(async () => {
  const dataDir = tempDir('fpk-cli-');
  const storage = await fileStorage({ dir: path.join(dataDir, 'store') });
  await ensureSuperAdminClient(storage, { clientId: ROOT.id, clientSecret: ROOT.secret });
  const platform = fhirPlatform({
    storage,
    exportDir: path.join(dataDir, 'exports'),
    token: { rateLimit: false },
  });
  const app = express();
  app.use((req, res, next) => {
    if (req.path.includes('$export-file')) {
      if (req.headers.range) host.ranges.push(req.headers.range);
      else if (host.cutNextDownload) {
        host.cutNextDownload = false;
        delete req.headers['accept-encoding']; // as stored, so half the bytes are half the file
        let sent = false;
        res.write = ((chunk: Buffer) => {
          if (!sent) {
            sent = true;
            // The headers (with the whole file's Content-Length), half of the first chunk, then the
            // connection closed (end, not destroy: a reset could drop bytes the client has not read
            // yet). The end comes a while after the bytes: a fetch body that errors discards the
            // chunks it has queued but not yet handed on (WHATWG streams), so an end right behind
            // them sometimes left the client nothing to resume from.
            if (!res.headersSent) res.flushHeaders();
            const socket = res.socket;
            socket?.write(chunk.subarray(0, Math.floor(chunk.length / 2)));
            setTimeout(() => socket?.end(), 1000);
          }
          return true;
        }) as typeof res.write;
        res.end = (() => res) as typeof res.end;
      }
    }
    if (req.path.includes('$export-status') && req.method === 'GET' && host.tamperNextManifest) {
      const send = res.send.bind(res);
      res.send = ((body: string) => {
        if (res.statusCode !== 200) return send(body);
        const manifest = JSON.parse(body);
        if (host.tamperNextManifest === 'count') manifest.output[0].count += 1;
        else manifest.output[0].url = manifest.output[0].url.replace('127.0.0.1', 'localhost');
        host.tamperNextManifest = undefined;
        return send(JSON.stringify(manifest));
      }) as typeof res.send;
    }
    next();
  });
  app.use('/api', platform.router);
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  host = {
    fhirUrl: `http://127.0.0.1:${port}/api/fhir/R4`,
    dataDir,
    storage,
    platform,
    server,
    ranges: [],
    cutNextDownload: false,
    tamperNextManifest: undefined,
  };
});

afterAll(async () => {
  host.server.closeAllConnections();
  await new Promise((resolve) => host.server.close(resolve));
  await host.platform.close();
  await host.storage.close();
});

const rootFlags = ['--client-id', ROOT.id, '--client-secret', ROOT.secret];

describe('command line: usage', () => {
  it('prints help for the program and every command, exit 0', async () => {
    const commands = [
      'serve',
      'init-project',
      'new-client',
      'keys',
      'export',
      'import',
      'rotate-super-admin-secret',
    ];
    const runs = await Promise.all([cli(['--help']), ...commands.map((c) => cli([c, '--help']))]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/^Usage: fhir-platform-kit/);
      expect(run.stdout).toContain('Exit codes:');
    }
    expect(runs[5]!.stdout).toContain('--group <id>');
  });

  it('exits 2 on a bad command line, with one line saying why', async () => {
    const runs = await Promise.all([
      cli(['export', '--bogus']),
      cli(['no-such-command']),
      cli(['keys', '--alg', 'HS256']),
      cli(['new-client', '--name', 'x']), // --project missing
      cli(['serve', '--port', 'abc']),
      cli(['export', '--client-id', 'a']), // neither a secret nor a key
      cli(['export', '--client-id', 'a', '--client-secret', 's', '--fhir-url', 'not a url']),
      // `new URL('localhost:3006')` parses (scheme `localhost:`): refused, not advertised.
      cli(['serve', '--base-url', 'localhost:3006']),
    ]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).not.toMatch(/\n\s+at /); // no stack trace
    }
    expect(runs[0].stderr).toContain("unknown option '--bogus'");
    expect(runs[2].stderr).toContain('HS256');
    expect(runs[3].stderr).toContain('--project');
    expect(runs[4].stderr).toMatch(/PORT \(--port\) must be an integer/);
    expect(runs[5].stderr).toContain('--client-secret');
    expect(runs[7].stderr).toMatch(/BASE_URL \(--base-url\) must be an absolute http or https URL/);
    // Said once (it was "must be an absolute http or https URL … (it must be an absolute …)").
    expect(runs[7].stderr.split('absolute http or https URL')).toHaveLength(2);
  });

  it('exits 2 before starting on a DATABASE_URL that is no PostgreSQL connection string, or a BASE_URL that is the FHIR base', async () => {
    // (vitest sets BASE_URL to '/', which serve would refuse first.)
    const env = { BASE_URL: '', PORT: '0', HOST: '127.0.0.1', DATA_DIR: tempDir('fpk-cli-refused-') };
    const runs = await Promise.all([
      // pg reads `notaurl` as the host `base`, and `mysql://…` as a PostgreSQL server.
      cli(['serve'], { env: { ...env, DATABASE_URL: 'notaurl' } }),
      cli(['serve', '--database-url', 'mysql://app:secret@localhost/fhir'], { env }),
      cli(['serve'], {
        env: { ...env, DATABASE_URL: 'postgres://db/fhir', DATABASE_READ_REPLICAS: 'replica' },
      }),
      cli(['serve'], { env: { ...env, BASE_URL: 'http://localhost:8107/fhir/R4' } }),
      cli(['rotate-super-admin-secret', '--database-url', 'notaurl']),
    ]);
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stdout).not.toContain('starting the standalone server');
      expect(run.stderr.trim().split('\n'), run.stderr).toHaveLength(1);
    }
    expect(runs[0].stderr).toMatch(
      /DATABASE_URL \(--database-url\) must be a PostgreSQL connection string: postgres:\/\//,
    );
    expect(runs[0].stderr).toContain('"notaurl", which is not a URL');
    expect(runs[1].stderr).toMatch(/DATABASE_URL \(--database-url\).*scheme mysql:/);
    expect(runs[1].stderr).not.toContain('secret');
    expect(runs[2].stderr).toMatch(/DATABASE_READ_REPLICAS \(--database-read-replicas\).*"replica"/);
    expect(runs[3].stderr).toMatch(/BASE_URL \(--base-url\) must be the server's origin.*not the FHIR base/);
    expect(runs[3].stderr).toMatch(/Set BASE_URL=http:\/\/localhost:8107 /);
    expect(runs[4].stderr).toMatch(/--database-url must be a PostgreSQL connection string/);
  });
});

describe('command line: against a server mounted under /api', () => {
  const work = tempDir('fpk-cli-work-');
  /** The project the export tests read, its admin client (secret) and its client with a key. */
  let projectId = '';
  let admin = { id: '', secret: '' };
  let jwtClient = '';
  /** A project of its own for the import test, and its admin client. */
  let importer = { id: '', secret: '' };
  const key = path.join(work, 'private-key.json');
  const jwks = path.join(work, 'jwks.json');

  const ndjsonPatients = ['p1', 'p2', 'p3', 'p4'].map((id) => ({
    resourceType: 'Patient',
    id,
    name: [{ family: id }],
  }));
  // o0 and o2 have the LOINC code of the --type-filter help example.
  const ndjsonObservations = ['p1', 'p1', 'p2', 'p3'].map((p, i) => ({
    resourceType: 'Observation',
    id: `o${i}`,
    status: 'final',
    code: { coding: [{ system: 'http://loinc.org', code: i % 2 === 0 ? '1234' : '5678' }], text: 'weight' },
    subject: { reference: `Patient/${p}` },
  }));
  const ndjsonGroup = {
    resourceType: 'Group',
    id: 'g1',
    type: 'person',
    actual: true,
    member: [{ entity: { reference: 'Patient/p1' } }, { entity: { reference: 'Patient/p2' } }],
  };

  // Each test stands alone (run alone or in any order): what several use is made here through the
  // platform, not by the tests that exercise the commands making it.
  beforeAll(async () => {
    const platformAdmin = host.platform.admin;
    projectId = (await platformAdmin.initProject(parameters({ name: 'CLI exports' }))).id;
    const adminClient = await platformAdmin.newClient(projectId, parameters({ name: 'admin', admin: true }));
    admin = { id: adminClient.id, secret: adminClient.secret! };
    const { publicKey, privateKey } = await generateKeyPair('ES384', { extractable: true });
    const meta = { kid: 'cli-test-key', alg: 'ES384', use: 'sig' };
    fs.writeFileSync(key, JSON.stringify({ ...(await exportJWK(privateKey)), ...meta }), { mode: 0o600 });
    const publicJwks = JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), ...meta }] });
    fs.writeFileSync(jwks, publicJwks);
    jwtClient = (
      await platformAdmin.newClient(
        projectId,
        parameters({ name: 'exporter', jwks: publicJwks, scope: 'system/*.read' }),
      )
    ).id;
    await host.storage.writeResources(
      projectId,
      [...ndjsonPatients, ...ndjsonObservations, ndjsonGroup].map((resource) => ({
        op: 'update' as const,
        resource,
      })),
    );
    const imports = (await platformAdmin.initProject(parameters({ name: 'CLI imports' }))).id;
    const importClient = await platformAdmin.newClient(
      imports,
      parameters({ name: 'importer', admin: true }),
    );
    importer = { id: importClient.id, secret: importClient.secret! };
  });

  it('init-project and new-client over HTTP print ids and secrets as JSON', async () => {
    const project = await cliJson([
      'init-project',
      ...rootFlags,
      '--name',
      'CLI project',
      '--owner-email',
      'a@b.example',
    ]);
    expect(project).toMatchObject({ name: 'CLI project', project: { resourceType: 'Project' } });
    const client = await cliJson([
      'new-client',
      ...rootFlags,
      '--project',
      project.projectId,
      '--name',
      'admin',
      '--admin',
    ]);
    expect(client).toMatchObject({ projectId: project.projectId, admin: true, name: 'admin' });
    expect(typeof client.clientSecret).toBe('string');
    // The client works: it registers a client of its own.
    const own = await cliJson([
      'new-client',
      '--client-id',
      client.clientId,
      '--client-secret',
      client.clientSecret,
      '--project',
      project.projectId,
      '--name',
      'own',
    ]);
    expect(own).toMatchObject({ projectId: project.projectId, name: 'own' });
  });

  it('keys writes a private JWK (0600) and a public JWKS that new-client registers', async () => {
    const stdoutJwks = await cliJson([
      'keys',
      '--alg',
      'RS384',
      '--private-key-out',
      path.join(work, 'rs.json'),
    ]);
    expect(stdoutJwks.keys[0]).toMatchObject({ kty: 'RSA', alg: 'RS384', use: 'sig' });
    expect(stdoutJwks.keys[0].d).toBeUndefined();
    const keyOut = path.join(work, 'keys-test-private.json');
    const jwksOut = path.join(work, 'keys-test-jwks.json');
    const written = await cliJson(['keys', '--private-key-out', keyOut, '--jwks-out', jwksOut]);
    expect(written).toMatchObject({ privateKey: keyOut, jwks: jwksOut });
    expect(fs.statSync(keyOut).mode & 0o777).toBe(0o600);
    const privateJwk = JSON.parse(fs.readFileSync(keyOut, 'utf8'));
    expect(privateJwk).toMatchObject({ kty: 'EC', crv: 'P-384', alg: 'ES384', kid: written.kid });
    expect(typeof privateJwk.d).toBe('string');
    // Never overwritten by accident.
    const again = await cli(['keys', '--private-key-out', keyOut]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('--force');
    // Nor the JWKS (a `> jwks.json` redirection would have emptied it before keys refused), and
    // nothing is written when one of the two exists: no new private key without its JWKS.
    const jwksBefore = fs.readFileSync(jwksOut, 'utf8');
    const otherKey = path.join(work, 'keys-test-other-private.json');
    const jwksTaken = await cli(['keys', '--private-key-out', otherKey, '--jwks-out', jwksOut]);
    expect(jwksTaken.code).toBe(1);
    expect(jwksTaken.stderr).toMatch(
      /keys-test-jwks\.json exists; choose another --jwks-out or pass --force/,
    );
    expect(fs.readFileSync(jwksOut, 'utf8')).toBe(jwksBefore);
    expect(fs.existsSync(otherKey)).toBe(false);
    const forced = await cliJson(['keys', '--private-key-out', otherKey, '--jwks-out', jwksOut, '--force']);
    expect(JSON.parse(fs.readFileSync(jwksOut, 'utf8')).keys[0].kid).toBe(forced.kid);
    fs.writeFileSync(jwksOut, jwksBefore); // the pair the rest of this test registers

    const client = await cliJson([
      'new-client',
      '--client-id',
      admin.id,
      '--client-secret',
      admin.secret,
      '--project',
      projectId,
      '--name',
      'key holder',
      '--jwks-file',
      jwksOut,
      '--client-scope',
      'system/*.read',
    ]);
    expect(client.scope).toBe('system/*.read');
    // The key it wrote signs the client's assertions.
    const exported = await cli([
      'export',
      '--client-id',
      client.clientId,
      '--private-key',
      keyOut,
      '--type',
      'Group',
      '--out',
      path.join(work, 'keys-test-export'),
      '--quiet',
    ]);
    expect(exported.code, exported.stderr).toBe(0);
  });

  it('wrong credentials exit 1 with one clear line, no stack trace', async () => {
    const wrongSecret = await cli([
      'export',
      '--client-id',
      admin.id,
      '--client-secret',
      'wrong',
      '--out',
      work,
    ]);
    expect(wrongSecret.code).toBe(1);
    expect(wrongSecret.stderr.trim().split('\n')).toHaveLength(1);
    expect(wrongSecret.stderr).toMatch(/Token request for client .* refused: 401 invalid_client/);
    // A key the client did not register.
    const otherKey = path.join(work, 'other.json');
    await cliJson(['keys', '--private-key-out', otherKey]);
    const wrongKey = await cli([
      'export',
      '--client-id',
      jwtClient,
      '--private-key',
      otherKey,
      '--out',
      work,
    ]);
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toMatch(/refused: 401 invalid_client/);
    expect(wrongKey.stderr).not.toMatch(/\n\s+at /);
    // --verbose adds the stack.
    const verbose = await cli(['export', '--verbose', '--client-id', admin.id, '--client-secret', 'x']);
    expect(verbose.code).toBe(1);
    expect(verbose.stderr).toMatch(/\n\s+at /);
    // Nothing listening.
    const port = await closedPort();
    const down = await cli(['export', ...rootFlags, '--fhir-url', `http://127.0.0.1:${port}/fhir/R4`]);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(
      new RegExp(`Cannot reach http://127\\.0\\.0\\.1:${port}/fhir/R4.*ECONNREFUSED`),
    );
  });

  it('import uploads NDJSON files and a directory, reports refused lines and exits 3', async () => {
    const dir = path.join(work, 'ndjson');
    fs.mkdirSync(dir);
    const patients = ndjsonPatients.slice(0, 3);
    const observations = ndjsonObservations;
    const group = ndjsonGroup;
    const ndjson = (rows: object[]) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
    fs.writeFileSync(path.join(dir, 'Patient.ndjson'), ndjson(patients));
    fs.writeFileSync(path.join(dir, 'Observation.ndjson'), ndjson(observations));
    fs.writeFileSync(path.join(dir, 'notes.txt'), 'not imported');
    const groupFile = path.join(work, 'group.ndjson');
    fs.writeFileSync(groupFile, ndjson([group]));
    const good = await cliJson(
      ['import', '--client-id', importer.id, '--client-secret', importer.secret, dir, groupFile],
      { dist: true },
    );
    expect(good).toMatchObject({ resources: 8, failed: 0, errors: [] });
    expect(good.files.map((f: { file: string }) => path.basename(f.file))).toEqual([
      'Observation.ndjson',
      'Patient.ndjson',
      'group.ndjson',
    ]);

    const bad = path.join(work, 'bad.ndjson');
    fs.writeFileSync(bad, `${JSON.stringify({ resourceType: 'Patient', id: 'p4' })}\n{not json\n`);
    const run = await cli(['import', '--client-id', importer.id, '--client-secret', importer.secret, bad]);
    expect(run.code, run.stderr).toBe(3);
    const summary = JSON.parse(run.stdout);
    expect(summary).toMatchObject({ resources: 1, failed: 1, files: [{ lines: 2, loaded: 1, failed: 1 }] });
    expect(summary.errors).toEqual([
      { location: 'bad.ndjson:2', message: expect.stringContaining('line 2') },
    ]);
    expect(run.stderr).toContain('1 line(s) were refused');
  });

  it('export (built bin, private_key_jwt): system level, progress, files checked against the manifest', async () => {
    const out = path.join(work, 'system');
    const run = await cli(
      ['export', '--client-id', jwtClient, '--private-key', key, '--out', out, '--progress-interval', '50'],
      { dist: true },
    );
    expect(run.code, run.stderr).toBe(0);
    const summary = JSON.parse(run.stdout);
    const byType = Object.fromEntries(
      summary.files.map((f: { type: string; lines: number; count: number }) => [f.type, f]),
    );
    expect(byType.Patient).toMatchObject({ lines: 4, count: 4 });
    expect(byType.Observation).toMatchObject({ lines: 4, count: 4 });
    expect(byType.Group).toMatchObject({ lines: 1, count: 1 });
    for (const f of summary.files) {
      expect(fs.readFileSync(path.join(out, f.file), 'utf8').trim().split('\n')).toHaveLength(f.lines);
    }
    expect(JSON.parse(fs.readFileSync(path.join(out, 'manifest.json'), 'utf8')).output).toHaveLength(
      summary.files.length,
    );
    expect(fs.existsSync(path.join(out, '.export-state.json'))).toBe(false);
    // Plain progress lines (stderr is a pipe): no escape sequences.
    expect(run.stderr).toMatch(/^export +\[[=-]+\] \d+% \| /m);
    expect(run.stderr).toMatch(/^download \[=+\] 100% \| \d+\/\d+ files, \d+ bytes/m);
    expect(run.stderr).not.toContain('\u001b[');
  });

  it('export of a Group: only its members', async () => {
    const out = path.join(work, 'group');
    const summary = await cliJson([
      'export',
      '--client-id',
      jwtClient,
      '--private-key',
      key,
      '--group',
      'g1',
      '--type',
      'Patient,Observation',
      '--out',
      out,
      '--quiet',
    ]);
    const lines = Object.fromEntries(
      summary.files.map((f: { type: string; lines: number }) => [f.type, f.lines]),
    );
    expect(lines).toEqual({ Patient: 2, Observation: 3 });
    const ids = fs
      .readFileSync(
        path.join(out, summary.files.find((f: { type: string }) => f.type === 'Patient').file),
        'utf8',
      )
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).id)
      .sort();
    expect(ids).toEqual(['p1', 'p2']);
  });

  it('export --type-filter: the help example Observation?code=1234 exports only those; a chain and a _has too', async () => {
    const help = await cli(['export', '--help']);
    expect(help.stdout).toContain('Observation?code=1234');
    /** The ids `export --type Observation,Patient` with these `--type-filter`s writes, by type. */
    const exported = async (dir: string, ...filters: string[]) => {
      const out = path.join(work, dir);
      const summary = await cliJson([
        'export',
        '--client-id',
        jwtClient,
        '--private-key',
        key,
        '--type',
        'Observation,Patient',
        ...filters.flatMap((f) => ['--type-filter', f]),
        '--out',
        out,
        '--quiet',
      ]);
      return (type: string) =>
        fs
          .readFileSync(
            path.join(out, summary.files.find((f: { type: string }) => f.type === type).file),
            'utf8',
          )
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l).id)
          .sort();
    };
    const ids = await exported('filtered', 'Observation?code=1234');
    expect(ids('Observation')).toEqual(['o0', 'o2']);
    // A type without a filter is exported whole.
    expect(ids('Patient')).toEqual(['p1', 'p2', 'p3', 'p4']);
    // A chain and a _has: p1's Observations; the patients with an Observation of code 5678 (p1, p3).
    const chained = await exported(
      'chained',
      'Observation?subject:Patient.name=p1',
      'Patient?_has:Observation:patient:code=5678',
    );
    expect(chained('Observation')).toEqual(['o0', 'o1']);
    expect(chained('Patient')).toEqual(['p1', 'p3']);
    // A filter the server refuses: exit 1, its reason said.
    const refused = await cli([
      'export',
      '--client-id',
      jwtClient,
      '--private-key',
      key,
      '--type-filter',
      'Observation?_sort=date',
      '--out',
      path.join(work, 'refused'),
      '--quiet',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('_sort');
  });

  it('resumes an interrupted download with Range when run again', async () => {
    const out = path.join(work, 'resume');
    const args = [
      'export',
      '--client-id',
      admin.id,
      '--client-secret',
      admin.secret,
      '--out',
      out,
      '--type',
      'Patient',
    ];
    host.cutNextDownload = true;
    const first = await cli(args);
    expect(first.code).toBe(1);
    expect(first.stderr).toMatch(/was interrupted .*run the same command again to resume/);
    const part = fs.readdirSync(out).find((name) => name.endsWith('.part'));
    expect(part).toBeDefined();
    const partSize = fs.statSync(path.join(out, part!)).size;
    expect(partSize, first.stderr).toBeGreaterThan(0);
    expect(fs.existsSync(path.join(out, '.export-state.json'))).toBe(true);

    host.ranges = [];
    const second = await cli(args);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).toContain('Resuming the export');
    expect(host.ranges).toEqual([`bytes=${partSize}-`]);
    const summary = JSON.parse(second.stdout);
    expect(summary.files).toEqual([expect.objectContaining({ type: 'Patient', lines: 4, count: 4 })]);
    const ids = fs
      .readFileSync(path.join(out, summary.files[0].file), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).id)
      .sort();
    expect(ids).toEqual(['p1', 'p2', 'p3', 'p4']);
  });

  it('says the export goes on and the same command resumes it when the server stops answering', async () => {
    // The same platform on a server of its own, which stops once it has answered the kick-off.
    const app = express();
    let stopAfterKickoff = true;
    app.use((req, res, next) => {
      if (stopAfterKickoff && req.path.endsWith('/$export')) {
        stopAfterKickoff = false;
        res.once('finish', () => {
          server.close();
          server.closeAllConnections();
        });
      }
      next();
    });
    app.use('/api', host.platform.router);
    let server = app.listen(0, '127.0.0.1');
    const stopped = once(server, 'close');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const out = path.join(work, 'server-gone');
    const args = [
      'export',
      '--fhir-url',
      `http://127.0.0.1:${port}/api/fhir/R4`,
      '--client-id',
      admin.id,
      '--client-secret',
      admin.secret,
      '--out',
      out,
      '--type',
      'Patient',
      '--quiet',
    ];
    const first = await cli(args);
    expect(first.code).toBe(1);
    expect(first.stderr).toMatch(
      /Cannot reach http:\/\/127\.0\.0\.1:\d+\/.*The export job goes on on the server; run the same command again to resume/,
    );
    expect(first.stderr.trim().split('\n')).toHaveLength(1);
    expect(fs.existsSync(path.join(out, '.export-state.json'))).toBe(true);

    // As it says: the server back on its port, the same command resumes that export.
    await stopped;
    server = app.listen(port, '127.0.0.1');
    await once(server, 'listening');
    try {
      const second = await cli(args);
      expect(second.code, second.stderr).toBe(0);
      expect(second.stderr).toContain('Resuming the export');
      expect(JSON.parse(second.stdout).files).toEqual([
        expect.objectContaining({ type: 'Patient', lines: 4, count: 4 }),
      ]);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  /** A Patient export by the admin client (secret) into `out`. */
  const exportPatients = (out: string) =>
    cli([
      'export',
      '--client-id',
      admin.id,
      '--client-secret',
      admin.secret,
      '--out',
      out,
      '--type',
      'Patient',
      '--quiet',
    ]);

  it('exits 3 when a file does not have the line count the manifest says', async () => {
    host.tamperNextManifest = 'count';
    const run = await exportPatients(path.join(work, 'tampered'));
    expect(run.code).toBe(3);
    expect(run.stderr).toMatch(/Line counts differ from the manifest: .* has 4 lines, the manifest says 5/);
  });

  it('does not send the access token to a file URL on another server', async () => {
    host.tamperNextManifest = 'origin';
    const run = await exportPatients(path.join(work, 'foreign'));
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(
      /names http:\/\/localhost:\d+\/.* on another server; the access token is not sent there/,
    );
  });

  it('offline init-project and new-client work on a stopped data dir and fail clearly on a running one', async () => {
    const locked = await cli(['init-project', '--data-dir', host.dataDir, '--name', 'Offline']);
    expect(locked.code).toBe(1);
    expect(locked.stderr).toMatch(/is in use by process \d+: a server is running on it; stop it/);
    expect(locked.stderr.trim().split('\n')).toHaveLength(1);

    const dataDir = tempDir('fpk-cli-offline-');
    const project = await cliJson(['init-project', '--data-dir', dataDir, '--name', 'Offline']);
    const client = await cliJson([
      'new-client',
      '--data-dir',
      dataDir,
      '--project',
      project.projectId,
      '--name',
      'seed',
      '--jwks-file',
      jwks,
    ]);
    expect(client).toMatchObject({ projectId: project.projectId, name: 'seed' });
    const refused = await cli([
      'new-client',
      '--data-dir',
      dataDir,
      '--project',
      'no-such-project',
      '--name',
      'x',
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/Refused: 404/);
    const both = await cli(['init-project', '--data-dir', dataDir, '--name', 'x', ...rootFlags]);
    expect(both.code).toBe(2);

    const storage = await fileStorage({ dir: path.join(dataDir, 'store') });
    try {
      expect((await storage.readProject(project.projectId)).name).toBe('Offline');
      expect((await storage.readClient(client.clientId)).projectId).toBe(project.projectId);
    } finally {
      await storage.close();
    }
  });

  it('offline init-project seeds a data directory that does not exist yet; new-client wants a store', async () => {
    const dataDir = path.join(tempDir('fpk-cli-new-'), 'new', 'data');
    const noStore = await cli(['new-client', '--data-dir', dataDir, '--project', 'p', '--name', 'x']);
    expect(noStore.code).toBe(1);
    expect(noStore.stderr).toMatch(/has no store yet/);
    expect(fs.existsSync(dataDir)).toBe(false);

    const project = await cliJson(['init-project', '--data-dir', dataDir, '--name', 'Seeded']);
    const storage = await fileStorage({ dir: path.join(dataDir, 'store') });
    try {
      expect((await storage.readProject(project.projectId)).name).toBe('Seeded');
    } finally {
      await storage.close();
    }
  });

  it('rotate-super-admin-secret prints a new secret once; the old one stops working', async () => {
    const dataDir = tempDir('fpk-cli-rotate-');
    const seed = await fileStorage({ dir: path.join(dataDir, 'store') });
    await ensureSuperAdminClient(seed, { clientId: 'super-admin', clientSecret: 'old-secret-0123456789' });
    await seed.close();

    const rotated = await cliJson(['rotate-super-admin-secret', '--data-dir', dataDir]);
    expect(rotated).toEqual({ clientId: 'super-admin', clientSecret: expect.any(String) });
    expect(rotated.clientSecret).toHaveLength(43);
    const storage = await fileStorage({ dir: path.join(dataDir, 'store') });
    try {
      const { secretHash } = await storage.readClient('super-admin');
      expect(await verifyClientSecret(rotated.clientSecret, secretHash!)).toBe(true);
      expect(await verifyClientSecret('old-secret-0123456789', secretHash!)).toBe(false);
    } finally {
      await storage.close();
    }

    // Refusals: a running server's store, a client that is not there, no store at all, no target.
    const locked = await cli([
      'rotate-super-admin-secret',
      '--data-dir',
      host.dataDir,
      '--client-id',
      ROOT.id,
    ]);
    expect(locked.code).toBe(1);
    expect(locked.stderr).toMatch(/a server is running on it/);
    // What a user can do: rotate has no --fhir-url (no HTTP form).
    expect(locked.stderr).not.toContain('--fhir-url');
    expect(locked.stderr).toMatch(/stop it and run this command again/);
    expect(locked.stderr).toMatch(/SUPER_ADMIN_CLIENT_ID and SUPER_ADMIN_CLIENT_SECRET/);
    const missing = await cli(['rotate-super-admin-secret', '--data-dir', dataDir, '--client-id', 'nobody']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/has no client nobody/);
    const empty = await cli(['rotate-super-admin-secret', '--data-dir', tempDir('fpk-cli-empty-')]);
    expect(empty.code).toBe(1);
    expect(empty.stderr).toMatch(/has no store yet/);
    const neither = await cli(['rotate-super-admin-secret']);
    expect(neither.code).toBe(2);
    for (const run of [locked, missing, empty, neither])
      expect(run.stderr.trim().split('\n')).toHaveLength(1);
  });
});
