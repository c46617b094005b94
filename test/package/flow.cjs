// The flow every throwaway host project runs against the installed tarball: real tokens, $init,
// SCIM create, FHIR writes, a system export through the worker pool and its downloads. Written in
// CommonJS so the ESM, CJS and TypeScript hosts all load the same file.
'use strict';
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { once } = require('node:events');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const ROOT = { id: 'root', secret: 'root-secret-0123456789' };

function basic(id, secret) {
  return `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`;
}

async function call(base, method, url, { token, body, type = 'application/fhir+json', headers = {} } = {}) {
  const res = await fetch(`${base}${url}`, {
    method,
    headers: {
      ...(token ? { Authorization: token } : {}),
      ...(body === undefined ? {} : { 'Content-Type': type }),
      ...headers,
    },
    ...(body === undefined ? {} : { body: typeof body === 'string' ? body : JSON.stringify(body) }),
  });
  const text = await res.text();
  let json;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

async function bearer(base, id, secret) {
  const res = await call(base, 'POST', '/oauth2/token', {
    token: basic(id, secret),
    body: 'grant_type=client_credentials',
    type: 'application/x-www-form-urlencoded',
  });
  assert.equal(res.status, 200, res.text);
  return `Bearer ${res.json.access_token}`;
}

/**
 * Runs the flow with the library `kit` (the installed package) and `express` (the host's). Throws
 * on the first unexpected answer. `openStorage` opens the store (default: the file store in `dir`).
 */
async function runFlow(kit, express, label, openStorage = (dir) => kit.fileStorage({ dir })) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-package-'));
  const storage = await openStorage(path.join(dir, 'store'));
  await kit.ensureSuperAdminClient(storage, { clientId: ROOT.id, clientSecret: ROOT.secret });
  const platform = kit.fhirPlatform({ storage, exportDir: path.join(dir, 'exports') });
  const app = express();
  app.use(platform.router);
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = `http://127.0.0.1:${server.address().port}`;
  // Worker threads started while the export runs: the export must go through the pool.
  let workers = 0;
  const onWorker = () => (workers += 1);
  process.on('worker', onWorker);
  try {
    assert.equal((await call(base, 'GET', '/healthz')).status, 200);
    const ready = await call(base, 'GET', '/readyz');
    assert.equal(ready.status, 200, ready.text);
    assert.deepEqual(ready.json.checks, { storage: 'ok', exportWorkers: 'ok', signingKeys: 'ok' });
    const root = await bearer(base, ROOT.id, ROOT.secret);
    const init = await call(base, 'POST', '/fhir/R4/Project/$init', {
      token: root,
      body: {
        resourceType: 'Parameters',
        parameter: [
          { name: 'name', valueString: 'Package check' },
          { name: 'ownerEmail', valueString: 'admin@example.org' },
          { name: 'ownerGivenName', valueString: 'Ada' },
          { name: 'ownerFamilyName', valueString: 'Admin' },
        ],
      },
    });
    assert.equal(init.status, 201, init.text);
    const projectId = init.json.id;

    const client = await call(base, 'POST', `/fhir/R4/Project/${projectId}/$new-client`, {
      token: root,
      body: {
        resourceType: 'Parameters',
        parameter: [
          { name: 'name', valueString: 'host' },
          { name: 'admin', valueBoolean: true },
        ],
      },
    });
    assert.equal(client.status, 201, client.text);
    const admin = await bearer(base, client.json.id, client.json.secret);

    const user = await call(base, 'POST', '/scim/v2/Users', {
      token: admin,
      type: 'application/scim+json',
      body: {
        schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
        userName: 'pat@example.org',
        userType: 'Patient',
        name: { givenName: 'Pat', familyName: 'Example' },
      },
    });
    assert.equal(user.status, 201, user.text);

    const patientRef = user.json.userName.startsWith('Patient/') ? user.json.userName : undefined;
    for (let i = 0; i < 3; i++) {
      const obs = await call(base, 'POST', '/fhir/R4/Observation', {
        token: admin,
        body: {
          resourceType: 'Observation',
          status: 'final',
          code: { text: `reading ${i}` },
          ...(patientRef ? { subject: { reference: patientRef } } : {}),
        },
      });
      assert.equal(obs.status, 201, obs.text);
    }

    const kickoff = await call(base, 'GET', '/fhir/R4/$export', {
      token: admin,
      headers: { Accept: 'application/fhir+json', Prefer: 'respond-async' },
    });
    assert.equal(kickoff.status, 202, kickoff.text);
    const status = new URL(kickoff.headers.get('content-location'));
    let manifest;
    for (let i = 0; i < 600 && !manifest; i++) {
      const res = await call(base, 'GET', status.pathname, { token: admin });
      if (res.status === 200) manifest = res.json;
      else {
        assert.equal(res.status, 202, res.text);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    assert.ok(manifest, 'the export completed');
    assert.ok(workers >= 1, 'the export ran in a worker thread of the pool');
    const counts = {};
    for (const entry of manifest.output) {
      const file = await call(base, 'GET', new URL(entry.url).pathname, { token: admin });
      assert.equal(file.status, 200, file.text);
      const lines = file.text.split('\n').filter((line) => line !== '');
      assert.equal(lines.length, entry.count);
      counts[entry.type] = (counts[entry.type] ?? 0) + lines.length;
    }
    assert.equal(counts.Observation, 3);
    assert.ok(counts.Patient >= 1, 'the SCIM user profile was exported');
    console.log(`${label}: ok (${JSON.stringify(counts)})`);
  } finally {
    process.off('worker', onWorker);
    server.closeAllConnections?.();
    await new Promise((resolve) => server.close(resolve));
    await platform.close();
    await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs the installed `fhir-platform-kit` bin (through npx, from the host project) without blocking. */
function bin(args, cwd) {
  return new Promise((resolve, reject) => {
    const child = spawn('npx', ['--no-install', 'fhir-platform-kit', ...args], {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function binJson(args, cwd) {
  const run = await bin(args, cwd);
  assert.equal(run.code, 0, run.stderr);
  return { json: JSON.parse(run.stdout), stderr: run.stderr };
}

/**
 * The newcomer's path through the installed package: the platform mounted under /api in the host's
 * Express app, a project and a client seeded with `platform.admin` (the client's JWKS made by the
 * bin's `keys`), data loaded with the bin's `import`, and a Group export run to completion by the
 * bin's `export` with progress lines and every file's line count checked against the manifest.
 */
async function runCliFlow(kit, express, label) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-package-cli-'));
  const storage = await kit.fileStorage({ dir: path.join(dir, 'store') });
  const platform = kit.fhirPlatform({ storage, exportDir: path.join(dir, 'exports') });
  const app = express();
  app.use('/api', platform.router);
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const fhirUrl = `http://127.0.0.1:${server.address().port}/api/fhir/R4`;
  try {
    const key = path.join(dir, 'key.json');
    const { json: jwks } = await binJson(['keys', '--private-key-out', key], process.cwd());
    const project = await platform.admin.initProject({
      resourceType: 'Parameters',
      parameter: [{ name: 'name', valueString: 'CLI package check' }],
    });
    const client = await platform.admin.newClient(project.id, {
      resourceType: 'Parameters',
      parameter: [
        { name: 'name', valueString: 'exporter' },
        { name: 'jwks', valueString: JSON.stringify(jwks) },
      ],
    });
    const auth = ['--fhir-url', fhirUrl, '--client-id', client.id, '--private-key', key];

    const ndjson = path.join(dir, 'data.ndjson');
    const rows = [
      { resourceType: 'Patient', id: 'pa', name: [{ family: 'A' }] },
      { resourceType: 'Patient', id: 'pb', name: [{ family: 'B' }] },
      { resourceType: 'Patient', id: 'pc', name: [{ family: 'C' }] },
      {
        resourceType: 'Group',
        id: 'cohort',
        type: 'person',
        actual: true,
        member: [{ entity: { reference: 'Patient/pa' } }, { entity: { reference: 'Patient/pb' } }],
      },
    ];
    fs.writeFileSync(ndjson, rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const { json: imported } = await binJson(['import', ...auth, ndjson], process.cwd());
    assert.equal(imported.resources, 4);

    const out = path.join(dir, 'export');
    const { json: summary, stderr } = await binJson(
      [
        'export',
        ...auth,
        '--group',
        'cohort',
        '--type',
        'Patient',
        '--out',
        out,
        '--progress-interval',
        '100',
      ],
      process.cwd(),
    );
    assert.deepEqual(
      summary.files.map((f) => [f.type, f.lines, f.count]),
      [['Patient', 2, 2]],
    );
    // stderr is a pipe here, so each bar prints plain lines (cli-progress's no-TTY mode). The
    // export bar: at least one line with an `X-Progress` text (`accepted`, `in-progress` or
    // "N resources written, a of b types done"); the first status poll follows the kick-off at
    // once, before a worker thread has even started, so it always sees the export running.
    assert.match(
      stderr,
      /^export +\[[=-]*\] \d+% \| (accepted|in-progress|\d+ resources written, \d+ of \d+ types? done)$/m,
      'the export bar showed X-Progress',
    );
    assert.match(stderr, /^export +\[=+\] 100% \| complete$/m, 'the export bar ended complete');
    assert.match(stderr, /^download \[=+\] 100% \| 1\/1 files/m, 'the download bar showed progress');
    console.log(`${label}: CLI ok (Group export of ${summary.resources} resources under /api)`);
  } finally {
    server.closeAllConnections?.();
    await new Promise((resolve) => server.close(resolve));
    await platform.close();
    await storage.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

module.exports = { runFlow, runCliFlow };
