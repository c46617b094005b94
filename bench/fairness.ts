/**
 * `npm run bench -- --fairness`: issue 44's tenant-fairness benchmark. The server runs in a child
 * process at its default limits (`server-child.ts`); two projects share it:
 *
 * - the noisy project holds the main dataset (`patients` generated patients) and sends every
 *   costly query of the issue, `noisyParallel` (12) at once, again and again;
 * - the quiet project holds one patient's data and a SMART Backend Services client (a registered
 *   public key, `private_key_jwt`). It sends, one after another, a mix of a read
 *   (`GET Patient/{id}`), a small search, a token request with a signed assertion and `/readyz`.
 *
 * First the quiet project runs `quietRequests` requests alone (idle), then as many while the noisy
 * project works (loaded). The targets: the quiet project's p99 loaded within 3x its p99 idle, and
 * none of its requests failing (no 5xx, nor any other non-2xx). The noisy project's answers are
 * counted (200, 400 `too-costly`, 429, 5xx) and its slowest is held to the issue's 30 s.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { runMeta, type BenchOptions, type BenchResults, type Figure } from './benchmark.js';
import { generatePatients } from './dataset.js';
import { bearer, expectJson } from './http-json.js';
import type { ProjectHandle } from './server-protocol.js';
import { startServer, type ServerProcess } from './server-process.js';
import { median, now, percentile } from './stats.js';

export interface FairnessOptions extends BenchOptions {
  /** Requests of the quiet project in each phase (idle, then loaded). */
  quietRequests: number;
  /** Costly requests of the noisy project in flight at once. @default 12 */
  noisyParallel?: number;
}

/** One costly query of the issue, as the noisy project sends it (path after the FHIR base). */
interface CostlyQuery {
  key: string;
  path: string;
}

const SORT9 = 'status,code,date,subject,value-quantity,category,performer,encounter,-_lastUpdated';
const repeated = (param: string, count: number): string =>
  Array.from({ length: count }, (_, i) => `${param}${i % 2 ? ' ' : ''}`).join('&');

/**
 * The issue's queries as the probe sent them (the 777-character `code:text` URL, nine `_sort` keys,
 * `_offset=11995`: refused at the default bounds, 400 `too-costly`), and each of those made as
 * costly as the default bounds admit, so that the noisy project's searches run too.
 */
export const NOISY_QUERIES: readonly CostlyQuery[] = [
  {
    key: 'text50',
    path: `Observation?${Array.from({ length: 50 }, () => 'code:text=code').join('&')}&_total=accurate`,
  },
  { key: 'sort9', path: `Observation?_sort=${SORT9}` },
  { key: 'missing', path: 'Patient?_has:Observation:subject:value-quantity:missing=false' },
  { key: 'nested', path: 'Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final' },
  { key: 'nested2', path: 'Patient?_has:Encounter:subject:_has:Observation:encounter:status=final' },
  { key: 'everything', path: 'Patient/$everything' },
  { key: 'offset11995', path: 'Observation?_offset=11995&_sort=value-quantity' },
  { key: 'text25', path: `Observation?${repeated('code:text=body', 25)}&_total=accurate` },
  { key: 'sort5', path: 'Observation?_sort=status,code,date,subject,-value-quantity&_total=accurate' },
  { key: 'offset9995', path: 'Observation?_offset=9995&_sort=value-quantity' },
];

/** The quiet project's kinds of request. */
export const QUIET_KINDS = ['read', 'search', 'token', 'readyz'] as const;
type QuietKind = (typeof QUIET_KINDS)[number];

interface QuietSample {
  kind: QuietKind;
  status: number;
  ms: number;
}

interface NoisySample {
  key: string;
  status: number;
  /** The OperationOutcome's first issue code, when not 200. */
  code?: string;
  ms: number;
}

/** The quiet project: its data, and a backend-services client with its private key. */
interface QuietTenant {
  origin: string;
  fhirBase: string;
  patientId: string;
  clientId: string;
  privateKey: CryptoKey;
  /** The latest access token it got (the reads and searches use it). */
  token: string;
}

/** Registers a client with a fresh ES384 public key in the quiet project (`$new-client`). */
async function registerJwtClient(
  fhirBase: string,
  admin: ProjectHandle,
): Promise<{ clientId: string; privateKey: CryptoKey }> {
  const { publicKey, privateKey } = await generateKeyPair('ES384');
  const jwk = { ...(await exportJWK(publicKey)), alg: 'ES384', kid: 'quiet-1', use: 'sig' };
  const answer = await expectJson(201, `${fhirBase}/Project/${admin.projectId}/$new-client`, {
    method: 'POST',
    headers: bearer(admin.token, { 'content-type': 'application/fhir+json' }),
    body: JSON.stringify({
      resourceType: 'Parameters',
      parameter: [
        { name: 'name', valueString: 'quiet backend service' },
        { name: 'jwks', valueString: JSON.stringify({ keys: [jwk] }) },
        { name: 'scope', valueString: 'system/*.read' },
      ],
    }),
  });
  return { clientId: (answer.body as { id: string }).id, privateKey };
}

/** The token request's form: client credentials with a fresh signed assertion (SMART Backend Services). */
async function tokenForm(tenant: QuietTenant): Promise<string> {
  const assertion = await new SignJWT({})
    .setProtectedHeader({ alg: 'ES384', typ: 'JWT', kid: 'quiet-1' })
    .setIssuer(tenant.clientId)
    .setSubject(tenant.clientId)
    .setAudience(`${tenant.origin}/oauth2/token`)
    .setJti(randomUUID())
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(tenant.privateKey);
  return new URLSearchParams({
    grant_type: 'client_credentials',
    scope: 'system/*.read',
    client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
    client_assertion: assertion,
  }).toString();
}

/** The request of `kind`, ready to send (its assertion signed before the clock starts). */
async function quietRequest(tenant: QuietTenant, kind: QuietKind): Promise<[string, RequestInit]> {
  const auth = { headers: bearer(tenant.token) };
  switch (kind) {
    case 'read':
      return [`${tenant.fhirBase}/Patient/${tenant.patientId}`, auth];
    case 'search':
      return [`${tenant.fhirBase}/Observation?subject=Patient/${tenant.patientId}&_count=10`, auth];
    case 'token':
      return [
        `${tenant.origin}/oauth2/token`,
        {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: await tokenForm(tenant),
        },
      ];
    case 'readyz':
      return [`${tenant.origin}/readyz`, {}];
  }
}

/** One quiet request, timed from send to the body's last byte. */
async function sendQuiet(tenant: QuietTenant, kind: QuietKind): Promise<QuietSample> {
  const [url, init] = await quietRequest(tenant, kind);
  const start = now();
  let status: number;
  let text = '';
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(120_000) });
    text = await res.text();
    status = res.status;
  } catch {
    status = 0; // No answer (connection closed, or 2 minutes passed).
  }
  const ms = now() - start;
  if (kind === 'token' && status === 200)
    tenant.token = (JSON.parse(text) as { access_token: string }).access_token;
  return { kind, status, ms };
}

/** `count` quiet requests, one after another, the kinds in turn; `progress` every 100. */
async function quietPhase(
  tenant: QuietTenant,
  count: number,
  progress: (done: number) => void = () => undefined,
): Promise<QuietSample[]> {
  const samples: QuietSample[] = [];
  for (let i = 0; i < count; i++) {
    samples.push(await sendQuiet(tenant, QUIET_KINDS[i % QUIET_KINDS.length]!));
    if ((i + 1) % 100 === 0) progress(i + 1);
  }
  return samples;
}

/** One costly request of the noisy project; the body of a 200 is read, not parsed. */
async function sendNoisy(fhirBase: string, token: string, query: CostlyQuery): Promise<NoisySample> {
  const start = now();
  try {
    const res = await fetch(`${fhirBase}/${query.path}`, {
      headers: bearer(token),
      signal: AbortSignal.timeout(120_000),
    });
    if (res.status === 200) {
      await res.arrayBuffer();
      return { key: query.key, status: 200, ms: now() - start };
    }
    const body = (await res.json().catch(() => undefined)) as { issue?: { code?: string }[] } | undefined;
    const code = body?.issue?.[0]?.code;
    return { key: query.key, status: res.status, ms: now() - start, ...(code ? { code } : {}) };
  } catch {
    return { key: query.key, status: 0, ms: now() - start };
  }
}

/**
 * `parallel` loops of the noisy project, each sending the next costly query of the rotation as
 * soon as its last one answered, until `stop` resolves; answers every sample once all settled.
 */
async function noisyLoad(
  fhirBase: string,
  token: string,
  parallel: number,
  stop: Promise<unknown>,
): Promise<NoisySample[]> {
  let stopped = false;
  void stop.finally(() => (stopped = true));
  let next = 0;
  const samples: NoisySample[] = [];
  const loop = async (): Promise<void> => {
    while (!stopped)
      samples.push(await sendNoisy(fhirBase, token, NOISY_QUERIES[next++ % NOISY_QUERIES.length]!));
  };
  await Promise.all(Array.from({ length: parallel }, loop));
  return samples;
}

/** The noisy project's data loaded (COPY on PostgreSQL, the storage API otherwise); answers its resources. */
async function loadNoisy(
  server: ServerProcess,
  options: FairnessOptions,
  projectId: string,
): Promise<number> {
  const { patients, seed } = options;
  if (server.info.store === 'postgres') {
    const copied = await server.call('copyGenerated', { projectId, patients, skip: 0, seed });
    return copied.resources;
  }
  const loaded = await server.call('loadGenerated', { projectId, patients, seed, batchSize: 1000 });
  return loaded.resources;
}

/** The quiet project: one patient's resources, its backend-services client and a first token. */
async function openQuiet(server: ServerProcess, seed: number): Promise<QuietTenant> {
  const origin = server.info.origin;
  const fhirBase = `${origin}/fhir/R4`;
  const admin = await server.call('newProject', { name: 'quiet', strict: false });
  await server.call('loadGenerated', { projectId: admin.projectId, patients: 1, seed, batchSize: 1000 });
  const patient = generatePatients(1, seed).next().value as { id: string };
  const client = await registerJwtClient(fhirBase, admin);
  const tenant: QuietTenant = { origin, fhirBase, patientId: patient.id, ...client, token: '' };
  const first = await sendQuiet(tenant, 'token');
  if (first.status !== 200) throw new Error(`the quiet client's token request answered ${first.status}`);
  return tenant;
}

const loadAverage = (): number => os.loadavg()[0]!;

/** Counts of the noisy project's answers by outcome. */
function noisyCounts(samples: readonly NoisySample[]): Record<string, number> {
  const counts = { ok: 0, tooCostly: 0, otherBadRequest: 0, throttled: 0, serverError: 0, other: 0 };
  for (const s of samples) {
    if (s.status === 200) counts.ok++;
    else if (s.status === 400 && s.code === 'too-costly') counts.tooCostly++;
    else if (s.status >= 400 && s.status < 500 && s.status !== 429) counts.otherBadRequest++;
    else if (s.status === 429) counts.throttled++;
    else if (s.status >= 500) counts.serverError++;
    else counts.other++;
  }
  return counts;
}

/** The figures of one run: the quiet project's latencies idle and loaded, and the noisy project's answers. */
function fairnessFigures(
  idle: readonly QuietSample[],
  loaded: readonly QuietSample[],
  noisy: readonly NoisySample[],
  context: { resources: number; loadBefore: number; loadAfter: number },
): Figure[] {
  const ms = (samples: readonly QuietSample[]): number[] => samples.map((s) => s.ms);
  const idleP99 = percentile(ms(idle), 99);
  const loadedP99 = percentile(ms(loaded), 99);
  const quiet = [...idle, ...loaded];
  const serverErrors = quiet.filter((s) => s.status >= 500 || s.status === 0).length;
  const otherFailures = quiet.filter(
    (s) => s.status !== 0 && (s.status < 200 || (s.status >= 300 && s.status < 500)),
  ).length;
  const counts = noisyCounts(noisy);
  const slowestNoisy = Math.max(0, ...noisy.map((s) => s.ms));
  const figures: Figure[] = [
    {
      key: 'fairness.resources',
      label: 'Noisy project: resources',
      value: context.resources,
      unit: 'resources',
    },
    {
      key: 'fairness.quiet.idle.p50',
      label: 'Quiet project idle: median',
      value: median(ms(idle)),
      unit: 'ms',
    },
    { key: 'fairness.quiet.idle.p99', label: 'Quiet project idle: p99', value: idleP99, unit: 'ms' },
    {
      key: 'fairness.quiet.loaded.p50',
      label: 'Quiet project loaded: median',
      value: median(ms(loaded)),
      unit: 'ms',
    },
    { key: 'fairness.quiet.loaded.p99', label: 'Quiet project loaded: p99', value: loadedP99, unit: 'ms' },
    {
      key: 'fairness.quiet.p99Ratio',
      label: 'Quiet project p99 loaded / idle',
      value: loadedP99 / idleP99,
      unit: 'x',
      target: '≤ 3',
      pass: loadedP99 / idleP99 <= 3,
    },
    {
      key: 'fairness.quiet.serverErrors',
      label: 'Quiet project: 5xx (or no answer)',
      value: serverErrors,
      unit: 'requests',
      target: '= 0',
      pass: serverErrors === 0,
    },
    {
      key: 'fairness.quiet.otherFailures',
      label: 'Quiet project: other non-2xx',
      value: otherFailures,
      unit: 'requests',
      target: '= 0',
      pass: otherFailures === 0,
    },
  ];
  for (const kind of QUIET_KINDS) {
    for (const [phase, samples] of [
      ['idle', idle],
      ['loaded', loaded],
    ] as const) {
      figures.push({
        key: `fairness.quiet.${kind}.${phase}.p99`,
        label: `Quiet ${kind}, ${phase}: p99`,
        value: percentile(ms(samples.filter((s) => s.kind === kind)), 99),
        unit: 'ms',
      });
    }
  }
  figures.push(
    {
      key: 'fairness.noisy.requests',
      label: 'Noisy project: costly requests answered',
      value: noisy.length,
      unit: 'requests',
    },
    { key: 'fairness.noisy.ok', label: 'Noisy project: 200', value: counts.ok!, unit: 'requests' },
    {
      key: 'fairness.noisy.tooCostly',
      label: 'Noisy project: 400 too-costly',
      value: counts.tooCostly!,
      unit: 'requests',
    },
    {
      key: 'fairness.noisy.otherBadRequest',
      label: 'Noisy project: other 4xx',
      value: counts.otherBadRequest!,
      unit: 'requests',
    },
    {
      key: 'fairness.noisy.throttled',
      label: 'Noisy project: 429',
      value: counts.throttled!,
      unit: 'requests',
    },
    {
      key: 'fairness.noisy.serverErrors',
      label: 'Noisy project: 5xx (or no answer)',
      value: counts.serverError! + counts.other!,
      unit: 'requests',
    },
    {
      key: 'fairness.noisy.slowest',
      label: 'Noisy project: slowest answer',
      value: slowestNoisy,
      unit: 'ms',
      target: '≤ 30,000',
      pass: slowestNoisy <= 30_000,
    },
    {
      key: 'fairness.loadAverage.before',
      label: 'Load average (1 min) before the loaded phase',
      value: context.loadBefore,
      unit: '',
    },
    {
      key: 'fairness.loadAverage.after',
      label: 'Load average (1 min) after it',
      value: context.loadAfter,
      unit: '',
    },
  );
  return figures;
}

/** Per query of the noisy project: answers by status (and issue code), and the median time. */
function noisyByQuery(
  samples: readonly NoisySample[],
): Record<string, { answers: Record<string, number>; medianMs: number }> {
  const out: Record<string, { answers: Record<string, number>; medianMs: number }> = {};
  for (const query of NOISY_QUERIES) {
    const mine = samples.filter((s) => s.key === query.key);
    const answers: Record<string, number> = {};
    for (const s of mine) {
      const what = s.code ? `${s.status} ${s.code}` : String(s.status);
      answers[what] = (answers[what] ?? 0) + 1;
    }
    out[query.key] = { answers, medianMs: Math.round(median(mine.map((s) => s.ms))) };
  }
  return out;
}

const round = (n: number): number =>
  Math.abs(n) < 10 ? Math.round(n * 1000) / 1000 : Math.round(n * 10) / 10;

/**
 * Runs the fairness benchmark on `options.store`: loads both projects, sends each costly query once
 * (the file store builds its postings on a parameter's first search), then the quiet project's
 * idle phase, then its loaded phase beside the noisy project's costly queries.
 */
export async function runFairness(options: FairnessOptions): Promise<BenchResults> {
  const started = Date.now();
  const { log } = options;
  const work = fs.mkdtempSync(path.join(options.workDir, 'fpk-fairness-'));
  const probeDir = path.join(work, 'probes');
  fs.mkdirSync(probeDir);
  const server = await startServer({
    store: options.store,
    dir: path.join(work, 'store'),
    exportDir: path.join(work, 'exports'),
    probeDir,
    ...(options.durability ? { durability: options.durability } : {}),
    ...(options.databaseUrl ? { databaseUrl: options.databaseUrl } : {}),
  });
  try {
    const fhirBase = `${server.info.origin}/fhir/R4`;
    const noisy = await server.call('newProject', { name: 'noisy', strict: false });
    log(
      `loading ${options.patients} patients into the noisy project; load average ${loadAverage().toFixed(1)}`,
    );
    const resources = await loadNoisy(server, options, noisy.projectId);
    const quiet = await openQuiet(server, options.seed + 1);
    log(`loaded ${resources} resources; each costly query once`);
    const single: NoisySample[] = [];
    for (const query of NOISY_QUERIES) {
      single.push(await sendNoisy(fhirBase, noisy.token, query));
      log(
        `  ${query.key}: ${single.at(-1)!.status} ${single.at(-1)!.code ?? ''} in ${Math.round(single.at(-1)!.ms)} ms`,
      );
    }
    await quietPhase(quiet, QUIET_KINDS.length * 5); // Warm-up: connections, compiled paths.
    log(`idle phase: ${options.quietRequests} quiet requests; load average ${loadAverage().toFixed(1)}`);
    const idle = await quietPhase(quiet, options.quietRequests);
    const loadBefore = loadAverage();
    log(
      `loaded phase: ${options.noisyParallel ?? 12} costly requests at once; load average ${loadBefore.toFixed(1)}`,
    );
    const loadedPhase = quietPhase(quiet, options.quietRequests, (done) =>
      log(`  ${done} quiet requests; load average ${loadAverage().toFixed(1)}`),
    );
    const noisySamples = await noisyLoad(fhirBase, noisy.token, options.noisyParallel ?? 12, loadedPhase);
    const loaded = await loadedPhase;
    const loadAfter = loadAverage();
    const figures = fairnessFigures(idle, loaded, noisySamples, { resources, loadBefore, loadAfter }).map(
      (f) => ({
        ...f,
        value: round(f.value),
      }),
    );
    for (const f of figures.filter((f) => f.target))
      log(`${f.label}: ${f.value} ${f.unit} (target ${f.target}: ${f.pass ? 'ok' : 'MISSED'})`);
    return {
      meta: runMeta(options, started, server.info.store, server.info.workerExports),
      figures,
      samples: {
        single: single.map((s) => ({ ...s, ms: Math.round(s.ms) })),
        noisyByQuery: noisyByQuery(noisySamples),
        quietFailures: [...idle, ...loaded].filter((s) => s.status < 200 || s.status >= 300),
        slowestQuiet: [...loaded]
          .sort((a, b) => b.ms - a.ms)
          .slice(0, 10)
          .map((s) => ({ ...s, ms: Math.round(s.ms) })),
      },
    };
  } finally {
    await server.close();
    fs.rmSync(work, { recursive: true, force: true });
  }
}
