// The standalone server (a real process on the file store, with its audit journal) answers a mix of
// audited requests from several clients at once: FHIR creates, reads and searches of patient data,
// SCIM creates, a cross-project read (404) and an unauthenticated one (401). It is SIGKILLed right
// after an answer, at a random point; then the journal it left is replayed (as its restart does)
// and every request that was answered must have its AuditEvent in the store, exactly once. The
// refusals (404, 401) are counted per source and window (docs/audit.md "Floods of refusals"): only
// the first of each source is recorded before its answer, the others' count when the window
// ends, so a kill loses that count and only the first refusal of each kind is required per round.
// FPK_AUDIT_KILL_ROUNDS=20 runs more rounds. Without the journal (`journalDir` removed from
// src/cli/standalone.ts) the test fails: the events of the last 100 ms before a kill are lost.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { createAuditTrail, PLATFORM_AUDIT_PROJECT_ID } from '../../src/audit/trail.js';
import { fileStorage } from '../../src/stores.js';
import { PATIENCE_MS } from '../helpers/eventually.js';

const ROUNDS = Number(process.env.FPK_AUDIT_KILL_ROUNDS ?? 2);
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const ROOT = { id: 'kill-root', secret: 'kill-root-secret-0123456789' };
const FHIR_JSON = 'application/fhir+json';

/** An answered request and how its event is recognised: its project, action and a text it holds. */
interface Acked {
  what: string;
  projectId: string;
  action: string;
  needle: string;
  /** A refusal after the first of its source in the round: counted in memory, not required. */
  counted?: boolean;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-audit-http-kill-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Starts `serve` on `dir`; resolves with the process and its origin once it listens. */
async function startServer(): Promise<{ server: ChildProcess; base: string }> {
  const server = spawn(process.execPath, ['--import', 'tsx', MAIN, 'serve'], {
    env: {
      ...process.env,
      PORT: '0',
      HOST: '127.0.0.1',
      // (vitest sets BASE_URL for Vite; the server's own default is wanted, on the port it gets)
      BASE_URL: 'http://127.0.0.1:0',
      DATA_DIR: dir,
      SUPER_ADMIN_CLIENT_ID: ROOT.id,
      SUPER_ADMIN_CLIENT_SECRET: ROOT.secret,
      LOG_LEVEL: 'info',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let errors = '';
  server.stderr.on('data', (data: Buffer) => (errors += data.toString()));
  const base = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`the server did not start: ${errors}`)), PATIENCE_MS);
    const onData = (data: Buffer) => {
      out += data.toString();
      for (const line of out.split('\n')) {
        if (!line.includes('"listening"')) continue;
        clearTimeout(timer);
        server.stdout.off('data', onData);
        server.stdout.resume();
        resolve(`http://${(JSON.parse(line) as { address: string }).address}`);
        return;
      }
    };
    server.stdout.on('data', onData);
    server.once('exit', (code) => reject(new Error(`the server exited (${String(code)}): ${errors}`)));
  });
  return { server, base };
}

function client(base: string) {
  const call = (url: string, init: RequestInit & { auth?: string } = {}) =>
    fetch(`${base}${url}`, {
      ...init,
      headers: {
        Accept: FHIR_JSON,
        ...(init.auth ? { Authorization: `Bearer ${init.auth}` } : {}),
        ...(init.headers as Record<string, string> | undefined),
      },
    });
  const token = async (id: string, secret: string, scope?: string) => {
    const res = await fetch(`${base}/oauth2/token`, {
      method: 'POST',
      headers: {
        Authorization: `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`,
        'Content-Type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) }),
    });
    if (res.status !== 200) throw new Error(`token: ${res.status} ${await res.text()}`);
    return ((await res.json()) as { access_token: string }).access_token;
  };
  return { call, token };
}

/** Two projects, each with an admin client (round 0 only; the store keeps them). */
async function setUp(base: string) {
  const { call, token } = client(base);
  const root = await token(ROOT.id, ROOT.secret);
  const project = async (name: string) => {
    const init = await call('/fhir/R4/Project/$init', {
      auth: root,
      method: 'POST',
      headers: { 'Content-Type': FHIR_JSON },
      body: JSON.stringify({ resourceType: 'Parameters', parameter: [{ name: 'name', valueString: name }] }),
    });
    expect(init.status).toBe(201);
    const id = ((await init.json()) as { id: string }).id;
    const created = await call(`/fhir/R4/Project/${id}/$new-client`, {
      auth: root,
      method: 'POST',
      headers: { 'Content-Type': FHIR_JSON },
      body: JSON.stringify({
        resourceType: 'Parameters',
        parameter: [
          { name: 'name', valueString: 'kill' },
          { name: 'scope', valueString: 'system/*.*' },
          { name: 'admin', valueBoolean: true },
        ],
      }),
    });
    expect(created.status).toBe(201);
    const { id: clientId, secret } = (await created.json()) as { id: string; secret: string };
    return { id, clientId, secret };
  };
  return { a: await project('Audited A'), b: await project('Audited B') };
}

type Projects = Awaited<ReturnType<typeof setUp>>;

/**
 * One round: clients send audited requests in loops; once every kind has been answered, the server
 * is SIGKILLed right after a random later answer (synchronously, in the answer's callback).
 */
async function round(known: Projects | undefined, acked: Acked[]): Promise<Projects> {
  const { server, base } = await startServer();
  const { call, token } = client(base);
  const projects = known ?? (await setUp(base));
  const exited = new Promise<void>((resolve) => server.once('exit', () => resolve()));
  const scope = 'project:admin system/*.*';
  const authA = await token(projects.a.clientId, projects.a.secret, scope);
  const authB = await token(projects.b.clientId, projects.b.secret, scope);
  let killed = false;
  const seen = new Set<string>();
  let countdown = -1;
  const answered = (entry: Acked) => {
    if (killed) return;
    acked.push(entry);
    seen.add(entry.what);
    if (countdown < 0 && seen.size === 6) countdown = Math.floor(Math.random() * 40);
    if (countdown === 0) {
      killed = true;
      server.kill('SIGKILL');
    }
    if (countdown > 0) countdown -= 1;
  };
  // A request whose answer was read whole; undefined when the server died first.
  const send = async (url: string, init: RequestInit & { auth?: string } = {}) => {
    try {
      const res = await call(url, init);
      const text = await res.text();
      return { status: res.status, text };
    } catch {
      return undefined;
    }
  };
  const fhirLoop = async () => {
    while (!killed) {
      const created = await send('/fhir/R4/Patient', {
        auth: authA,
        method: 'POST',
        headers: { 'Content-Type': FHIR_JSON },
        body: JSON.stringify({ resourceType: 'Patient', name: [{ family: 'Kill' }] }),
      });
      if (!created) return;
      expect(created.status).toBe(201);
      const id = (JSON.parse(created.text) as { id: string }).id;
      const reference = `"reference":"Patient/${id}"`;
      answered({ what: 'create', projectId: projects.a.id, action: 'C', needle: reference });
      const read = await send(`/fhir/R4/Patient/${id}`, { auth: authA });
      if (!read) return;
      expect(read.status).toBe(200);
      answered({ what: 'read', projectId: projects.a.id, action: 'R', needle: reference });
      const search = await send(`/fhir/R4/Patient?_id=${id}`, { auth: authA });
      if (!search) return;
      expect(search.status).toBe(200);
      answered({ what: 'search', projectId: projects.a.id, action: 'E', needle: `_id=${id}` });
      // Another project's patient: a 404, recorded in the caller's project.
      const cross = await send(`/fhir/R4/Patient/${id}`, { auth: authB });
      if (!cross) return;
      expect(cross.status).toBe(404);
      answered({
        what: 'cross',
        projectId: projects.b.id,
        action: 'R',
        needle: `Patient/${id}`,
        counted: seen.has('cross'),
      });
    }
  };
  const scimLoop = async () => {
    while (!killed) {
      const created = await send('/scim/v2/Users', {
        auth: authA,
        method: 'POST',
        headers: { 'Content-Type': 'application/scim+json' },
        body: JSON.stringify({
          schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
          userName: `${randomUUID()}@example.org`,
          userType: 'Practitioner',
        }),
      });
      if (!created) return;
      expect(created.status).toBe(201);
      const id = (JSON.parse(created.text) as { id: string }).id;
      answered({ what: 'scim', projectId: projects.a.id, action: 'C', needle: `"${id}"` });
    }
  };
  const anonymousLoop = async () => {
    while (!killed) {
      const nonce = randomUUID();
      const res = await send(`/fhir/R4/Patient/${nonce}`);
      if (!res) return;
      expect(res.status).toBe(401);
      answered({
        what: 'anonymous',
        projectId: PLATFORM_AUDIT_PROJECT_ID,
        action: 'R',
        needle: nonce,
        counted: seen.has('anonymous'),
      });
    }
  };
  // At the latest (a loop that never ends): the kill the loops wait for.
  const timer = setTimeout(() => server.kill('SIGKILL'), PATIENCE_MS);
  try {
    await Promise.all([fhirLoop(), scimLoop(), anonymousLoop()]);
  } finally {
    killed = true;
    server.kill('SIGKILL');
    clearTimeout(timer);
    await exited;
  }
  return projects;
}

/** The searchable text of an event: its JSON with each `entity.query` decoded. */
function eventText(event: Record<string, unknown>): string {
  const entities = (event.entity ?? []) as { query?: string }[];
  const queries = entities.map((e) => (e.query ? Buffer.from(e.query, 'base64').toString('utf8') : ''));
  return `${JSON.stringify(event)}\n${queries.join('\n')}`;
}

describe('audit trail of the standalone server under kill -9', () => {
  it(
    `every answered request has its AuditEvent after ${ROUNDS} kills right after answers`,
    { timeout: Math.max(10 * 60_000, ROUNDS * 2 * PATIENCE_MS) },
    async () => {
      const acked: Acked[] = [];
      let projects: Projects | undefined;
      for (let r = 0; r < ROUNDS; r++) {
        const before = acked.length;
        projects = await round(projects, acked);
        expect(acked.length).toBeGreaterThan(before);
        // What a restart does first: the trail replays the dead process's journal into the store.
        const storage = await fileStorage({ dir: path.join(dir, 'store') });
        const trail = createAuditTrail({ storage, journalDir: path.join(dir, 'audit-journal') });
        try {
          await trail.flush();
          const byProject = new Map<string, { action: string; text: string }[]>();
          for (const projectId of [projects.a.id, projects.b.id, PLATFORM_AUDIT_PROJECT_ID]) {
            const page = await storage.searchResources(projectId, 'AuditEvent');
            const ids = page.resources.map((e) => e.id);
            expect(new Set(ids).size, 'each event stored once').toBe(ids.length);
            byProject.set(
              projectId,
              page.resources.map((e) => ({ action: e.action as string, text: eventText(e) })),
            );
          }
          const missing = acked.filter(
            (a) =>
              !a.counted &&
              !byProject.get(a.projectId)!.some((e) => e.action === a.action && e.text.includes(a.needle)),
          );
          expect(missing, `round ${r}: answered requests without their event`).toEqual([]);
        } finally {
          await trail.close();
          await storage.close();
        }
      }
      const required = acked.filter((a) => !a.counted);
      const kinds = new Map<string, number>();
      for (const a of required) kinds.set(a.what, (kinds.get(a.what) ?? 0) + 1);
      console.info(
        `audit HTTP kill test: ${ROUNDS} rounds, ${required.length} answered requests found with their event ` +
          `(${[...kinds].map(([k, n]) => `${k} ${n}`).join(', ')}); ${acked.length - required.length} ` +
          'refusals counted',
      );
    },
  );
});
