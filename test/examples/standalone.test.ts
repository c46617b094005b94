import { afterEach, describe, expect, it } from 'vitest';
import { startStandaloneServer, type StandaloneServer } from '../../examples/standalone/server.js';
import { tempDir } from '../helpers/temp-dir.js';
import { eventually } from '../helpers/eventually.js';

const FHIR_JSON = 'application/fhir+json';
const running: StandaloneServer[] = [];
afterEach(async () => {
  for (const server of running.splice(0)) await server.close();
});

async function start(dataDir: string, superAdmin?: { clientId?: string; clientSecret?: string }) {
  const server = await startStandaloneServer({ dataDir, port: 0, host: '127.0.0.1', superAdmin });
  running.push(server);
  return server;
}

async function token(baseUrl: string, clientId: string, secret: string): Promise<string> {
  const res = await fetch(`${baseUrl}/oauth2/token`, {
    method: 'POST',
    headers: { Authorization: `Basic ${Buffer.from(`${clientId}:${secret}`).toString('base64')}` },
    body: new URLSearchParams({ grant_type: 'client_credentials' }),
  });
  expect(res.status).toBe(200);
  return `Bearer ${((await res.json()) as { access_token: string }).access_token}`;
}

describe('example: the standalone server built from the public API (examples/standalone)', () => {
  it('generates the super-admin once, creates a project, writes, exports through the workers and downloads', async () => {
    const dataDir = tempDir('fpk-standalone-example-');
    const first = await start(dataDir);
    const { clientId, clientSecret } = first.superAdmin;
    expect(clientId).toBe('super-admin');
    expect(clientSecret).toEqual(expect.any(String));
    const { baseUrl } = first;
    expect((await fetch(`${baseUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${baseUrl}/readyz`)).status).toBe(200);

    // Unrouted paths answer a FHIR 404, not Express's HTML page.
    const unrouted = await fetch(`${baseUrl}/nowhere`);
    expect(unrouted.status).toBe(404);
    expect(unrouted.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
    // What Node's parser refuses (headers over 16 KB) answers in the protocol of its path too.
    const huge = await fetch(`${baseUrl}/scim/v2/Users`, { headers: { 'X-Big': 'x'.repeat(20_000) } });
    expect(huge.status).toBe(431);
    expect(huge.headers.get('content-type')).toMatch(/^application\/scim\+json/);

    const root = await token(baseUrl, clientId, clientSecret!);
    const init = await fetch(`${baseUrl}/fhir/R4/Project/$init`, {
      method: 'POST',
      headers: { Authorization: root, 'Content-Type': FHIR_JSON },
      body: JSON.stringify({
        resourceType: 'Parameters',
        parameter: [{ name: 'name', valueString: 'Acme' }],
      }),
    });
    expect(init.status).toBe(201);
    const project = ((await init.json()) as { id: string }).id;
    const registered = await fetch(`${baseUrl}/fhir/R4/Project/${project}/$new-client`, {
      method: 'POST',
      headers: { Authorization: root, 'Content-Type': FHIR_JSON },
      body: JSON.stringify({
        resourceType: 'Parameters',
        parameter: [
          { name: 'name', valueString: 'etl' },
          { name: 'scope', valueString: 'system/*.*' },
        ],
      }),
    });
    expect(registered.status).toBe(201);
    const client = (await registered.json()) as { id: string; secret: string };
    const auth = await token(baseUrl, client.id, client.secret);

    const created = await fetch(`${baseUrl}/fhir/R4/Patient`, {
      method: 'POST',
      headers: { Authorization: auth, 'Content-Type': FHIR_JSON },
      body: JSON.stringify({ resourceType: 'Patient', name: [{ family: 'Alvarez' }] }),
    });
    expect(created.status).toBe(201);

    const kickoff = await fetch(`${baseUrl}/fhir/R4/$export?_type=Patient`, {
      headers: { Authorization: auth, Accept: FHIR_JSON, Prefer: 'respond-async' },
    });
    expect(kickoff.status).toBe(202);
    const statusUrl = kickoff.headers.get('content-location')!;
    expect(statusUrl.startsWith(`${baseUrl}/fhir/R4/`)).toBe(true);
    const manifest = await eventually('the export to complete', async () => {
      const status = await fetch(statusUrl, { headers: { Authorization: auth } });
      if (status.status === 200) return (await status.json()) as { output: { type: string; url: string }[] };
      expect(status.status).toBe(202);
      await status.arrayBuffer();
      return undefined;
    });
    expect(manifest?.output.map((file) => file.type)).toEqual(['Patient']);
    const file = await fetch(manifest.output[0]!.url, { headers: { Authorization: auth } });
    expect(file.status).toBe(200);
    expect(
      (await file.text())
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line).name[0].family),
    ).toEqual(['Alvarez']);

    // A second start on the same data keeps the client and shows no secret.
    await first.close();
    running.splice(running.indexOf(first), 1);
    const second = await start(dataDir);
    expect(second.superAdmin).toEqual({ clientId: 'super-admin', clientSecret: undefined });
    expect(
      (
        await fetch(`${second.baseUrl}/oauth2/token`, {
          method: 'POST',
          headers: {
            Authorization: `Basic ${Buffer.from(`super-admin:${clientSecret!}`).toString('base64')}`,
          },
          body: new URLSearchParams({ grant_type: 'client_credentials' }),
        })
      ).status,
    ).toBe(200);
  });

  it('takes the super-admin credentials it is given', async () => {
    const server = await start(tempDir('fpk-standalone-example-'), {
      clientId: 'ops',
      clientSecret: 'ops-secret-0123456789',
    });
    expect(server.superAdmin).toEqual({ clientId: 'ops', clientSecret: undefined });
    await token(server.baseUrl, 'ops', 'ops-secret-0123456789');
  });
});
