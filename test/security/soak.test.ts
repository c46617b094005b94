// Mixed load against the standalone server (a real process on the file store): SCIM creates and
// PATCHes, FHIR writes, reads and searches, token requests, and exports kicked off, polled,
// downloaded and deleted one after the other, from several clients at once, for a fixed time.
// Asserted: no 5xx; the server's RSS and open file descriptors flat across the exports; FHIR read
// p99 while exports run within a bound of the idle p99. CI runs it for SOAK_SECONDS (20 s);
// `FPK_SOAK_SECONDS=600 npx vitest run test/security/soak.test.ts` is the soak mode, which also
// holds the read p99 to 3x idle (the CI run only reports it: the CI machine runs the load, the
// server and other suites on two cores). Figures go to stdout and docs/reliability.md.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sleep } from '../helpers/sleep.js';
import { PATIENCE_MS } from '../helpers/eventually.js';
import { tempDir } from '../helpers/temp-dir.js';

const SOAK_SECONDS = Number(process.env.FPK_SOAK_SECONDS ?? '20');
const SOAK_MODE = process.env.FPK_SOAK_SECONDS !== undefined;
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const ROOT = { id: 'soak-root', secret: 'soak-root-secret-0123456789' };
const FHIR_JSON = 'application/fhir+json';

let server: ChildProcess;
let base: string;
let dir: string;

/** Resident set size (KiB) and open descriptors of a process, from /proc. */
function usage(pid: number): { rssKiB: number; fds: number } {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return { rssKiB, fds: fs.readdirSync(`/proc/${pid}/fd`).length };
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

async function token(id: string, secret: string, scope?: string): Promise<string> {
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
}

beforeAll(async () => {
  dir = tempDir('fpk-soak-');
  // A bounded heap: memory that leaks makes the server fail instead of only growing, and the
  // collector reclaims garbage instead of letting the heap expand into a large machine's memory.
  server = spawn(process.execPath, ['--max-old-space-size=256', '--import', 'tsx', MAIN, 'serve'], {
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
  const errors: string[] = [];
  server.stderr!.on('data', (data: Buffer) => errors.push(data.toString()));
  base = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(
      () => reject(new Error(`the server did not start: ${errors.join('')}`)),
      PATIENCE_MS,
    );
    const onData = (data: Buffer) => {
      out += data.toString();
      for (const line of out.split('\n')) {
        if (!line.includes('"listening"')) continue;
        const { address } = JSON.parse(line) as { address: string };
        clearTimeout(timer);
        server.stdout!.off('data', onData);
        // Drain the request log from now on.
        server.stdout!.resume();
        resolve(`http://${address}`);
        return;
      }
    };
    server.stdout!.on('data', onData);
    server.once('exit', (code) =>
      reject(new Error(`the server exited (${String(code)}): ${errors.join('')}`)),
    );
  });
});

afterAll(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once('exit', resolve));
    server.kill('SIGTERM');
    await exited;
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('soak: mixed load on the standalone server', () => {
  it(
    `holds for ${SOAK_SECONDS} s: no 5xx, RSS and descriptors flat across exports, reads fast during exports`,
    { timeout: (SOAK_SECONDS + 120) * 1000 },
    async () => {
      const pid = server.pid!;
      // A project, an admin client and data to read and export.
      const call = async (url: string, init: RequestInit & { auth: string }): Promise<Response> =>
        fetch(`${base}${url}`, {
          ...init,
          headers: { Authorization: `Bearer ${init.auth}`, Accept: FHIR_JSON, ...(init.headers ?? {}) },
        });
      /** A new seeded project and an admin token of its client (exports go 30 an hour per project). */
      const newProject = async (name: string): Promise<{ token: string; renew: () => Promise<string> }> => {
        // A fresh super-admin token: tokens expire (5 minutes), and the soak mode runs longer.
        const root = await token(ROOT.id, ROOT.secret);
        const init = await call('/fhir/R4/Project/$init', {
          auth: root,
          method: 'POST',
          headers: { 'Content-Type': FHIR_JSON },
          body: JSON.stringify({
            resourceType: 'Parameters',
            parameter: [{ name: 'name', valueString: name }],
          }),
        });
        expect(init.status).toBe(201);
        const projectId = ((await init.json()) as { id: string }).id;
        const newClient = await call(`/fhir/R4/Project/${projectId}/$new-client`, {
          auth: root,
          method: 'POST',
          headers: { 'Content-Type': FHIR_JSON },
          body: JSON.stringify({
            resourceType: 'Parameters',
            parameter: [
              { name: 'name', valueString: 'soak' },
              { name: 'scope', valueString: 'system/*.*' },
              { name: 'admin', valueBoolean: true },
            ],
          }),
        });
        expect(newClient.status).toBe(201);
        const client = (await newClient.json()) as { id: string; secret: string };
        const renew = () => token(client.id, client.secret, 'project:admin system/*.*');
        const projectToken = await renew();
        const seed = Array.from({ length: 2000 }, (_, i) => ({
          resourceType: 'Observation',
          id: `seed-${i}`,
          status: 'final',
          code: { text: 'soak' },
          subject: { reference: 'Patient/p0' },
        }));
        const form = new FormData();
        form.append(
          'file',
          new Blob([
            [{ resourceType: 'Patient', id: 'p0' }, ...seed].map((r) => JSON.stringify(r)).join('\n'),
          ]),
          'seed.ndjson',
        );
        expect((await call('/fhir/R4', { auth: projectToken, method: 'POST', body: form })).status).toBe(200);
        return { token: projectToken, renew };
      };
      const main = await newProject('Soak');
      let auth = main.token;
      let exportProject = await newProject('Soak exports 0');
      let exportsInProject = 0;

      const statuses = new Map<number, number>();
      const count = (status: number) => statuses.set(status, (statuses.get(status) ?? 0) + 1);
      const timedRead = async (): Promise<number> => {
        const started = performance.now();
        const res = await call(`/fhir/R4/Observation/seed-${Math.floor(Math.random() * 2000)}`, { auth });
        await res.arrayBuffer();
        count(res.status);
        return performance.now() - started;
      };
      // Idle read latency first.
      const idle: number[] = [];
      for (let i = 0; i < 300; i++) idle.push(await timedRead());

      const deadline = Date.now() + SOAK_SECONDS * 1000;
      let exporting = false;
      const duringExports: number[] = [];
      let exportCount = 0;
      let requests = 0;
      const tracked = async (url: string, init: RequestInit & { auth?: string } = {}): Promise<Response> => {
        const res = await call(url, { auth, ...init });
        await res.arrayBuffer();
        count(res.status);
        requests += 1;
        return res;
      };

      const scimLoop = async (worker: number) => {
        for (let i = 0; Date.now() < deadline; i++) {
          const created = await call('/scim/v2/Users', {
            auth,
            method: 'POST',
            headers: { 'Content-Type': 'application/scim+json', Accept: 'application/scim+json' },
            body: JSON.stringify({
              schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'],
              userName: `soak-${worker}-${i}@example.org`,
              userType: 'Patient',
            }),
          });
          count(created.status);
          requests += 1;
          const user = (await created.json()) as { id?: string };
          if (!user.id) continue;
          await tracked(`/scim/v2/Users/${user.id}`, {
            method: 'PATCH',
            headers: { 'Content-Type': 'application/scim+json', Accept: 'application/scim+json' },
            body: JSON.stringify({
              schemas: ['urn:ietf:params:scim:api:messages:2.0:PatchOp'],
              Operations: [{ op: 'replace', path: 'active', value: i % 2 === 0 }],
            }),
          });
        }
      };
      const fhirLoop = async (worker: number) => {
        for (let i = 0; Date.now() < deadline; i++) {
          await tracked('/fhir/R4/Observation', {
            method: 'POST',
            headers: { 'Content-Type': FHIR_JSON },
            body: JSON.stringify({
              resourceType: 'Observation',
              status: 'final',
              code: { text: `w${worker}` },
              subject: { reference: 'Patient/p0' },
            }),
          });
          await tracked('/fhir/R4/Observation?_count=20');
          const ms = await timedRead();
          requests += 1;
          if (exporting) duringExports.push(ms);
          if (i % 50 === 49) {
            auth = await main.renew();
            requests += 1;
          }
        }
      };
      const exportOnce = async () => {
        if (exportsInProject === 25) {
          exportProject = await newProject(`Soak exports ${requests}`);
          exportsInProject = 0;
        }
        exportsInProject += 1;
        // A fresh token per export: a project serves 25 exports, which may outlast a token.
        const auth = await exportProject.renew();
        const kickoff = await call('/fhir/R4/$export', { auth, headers: { Prefer: 'respond-async' } });
        count(kickoff.status);
        await kickoff.arrayBuffer();
        expect(kickoff.status).toBe(202);
        const status = new URL(kickoff.headers.get('content-location')!).pathname;
        let manifest: { output: { url: string }[] } | undefined;
        while (!manifest) {
          const res = await call(status, { auth });
          count(res.status);
          if (res.status === 200) manifest = (await res.json()) as typeof manifest;
          else {
            await res.arrayBuffer();
            await sleep(100);
          }
        }
        for (const output of manifest.output) await tracked(new URL(output.url).pathname, { auth });
        await tracked(status, { method: 'DELETE', auth });
      };
      const exportLoop = async () => {
        while (Date.now() < deadline) {
          exporting = true;
          await exportOnce();
          exporting = false;
          exportCount += 1;
          await sleep(200);
        }
      };
      const before = usage(pid);
      const loadBefore = os.loadavg();
      await Promise.all([scimLoop(0), scimLoop(1), fhirLoop(0), fhirLoop(1), fhirLoop(2), exportLoop()]);
      const afterLoad = usage(pid);
      const loadAfter = os.loadavg();
      // Then exports alone, the data no longer growing, all of one project made first (a project's
      // logs stay open: a new project adds descriptors by design): memory and descriptors after each.
      exportProject = await newProject('Soak exports alone');
      exportsInProject = 0;
      const exportUsage: { rssKiB: number; fds: number }[] = [];
      for (let i = 0; i < (SOAK_MODE ? 24 : 12); i++) {
        await exportOnce();
        exportUsage.push(usage(pid));
      }

      const serverErrors = [...statuses].filter(([status]) => status >= 500);
      const idleP99 = percentile(idle, 99);
      const exportP99 = percentile(duringExports, 99);
      // Skip the first exports of the phase when judging growth (the collector settles).
      const firstSettled = exportUsage[2]!;
      const last = exportUsage.at(-1)!;
      const mib = (kib: number) => Math.round(kib / 1024);
      console.info(
        `soak: ${SOAK_SECONDS} s of mixed load, ${requests} requests, ${exportCount} exports during it; statuses ` +
          `${JSON.stringify(Object.fromEntries(statuses))}; RSS ${mib(before.rssKiB)} MiB before, ` +
          `${mib(afterLoad.rssKiB)} MiB after the load; ${exportUsage.length} exports alone: RSS ` +
          `${mib(firstSettled.rssKiB)} -> ${mib(last.rssKiB)} MiB, descriptors ${firstSettled.fds} -> ${last.fds} ` +
          `(${before.fds} before the load, ${afterLoad.fds} after it); FHIR read p99 idle ` +
          `${idleP99.toFixed(1)} ms, during exports ${exportP99.toFixed(1)} ms (${(exportP99 / idleP99).toFixed(2)}x, ` +
          `${duringExports.length} reads); load average (1/5/15 min) ${loadBefore.map((l) => l.toFixed(2)).join('/')} ` +
          `before the load, ${loadAfter.map((l) => l.toFixed(2)).join('/')} at its end (${os.cpus().length} cores)`,
      );
      expect(serverErrors).toEqual([]);
      expect(server.exitCode).toBeNull();
      expect(exportCount).toBeGreaterThanOrEqual(2);
      // Flat: repeated exports neither keep memory nor leave descriptors open.
      expect(last.rssKiB).toBeLessThan(firstSettled.rssKiB * 1.2 + 16 * 1024);
      expect(last.fds).toBeLessThanOrEqual(firstSettled.fds + 4);
      expect(duringExports.length).toBeGreaterThan(0);
      if (SOAK_MODE) expect(exportP99).toBeLessThanOrEqual(3 * Math.max(idleP99, 1));
    },
  );
});
