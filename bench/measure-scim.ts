import { bearer, expectJson } from './http-json.js';
import { prng } from './dataset.js';
import { median, now, percentile } from './stats.js';

const SCIM = 'application/scim+json';
const USER_SCHEMA = 'urn:ietf:params:scim:schemas:core:2.0:User';
const PATCH_SCHEMA = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';

export interface LatencyFigures {
  count: number;
  medianMs: number;
  p99Ms: number;
}

export interface ScimFigures {
  users: number;
  lookup: LatencyFigures;
  create: LatencyFigures;
  patch: LatencyFigures;
}

/**
 * `POST /Users` of a new Practitioner user (unique `userName` from `n` and the clock), as the
 * latency measurements send it; throws unless the answer is 201.
 */
export async function createScimUser(scimBase: string, token: string, n: number): Promise<void> {
  await expectJson(201, `${scimBase}/Users`, {
    method: 'POST',
    headers: bearer(token, { accept: SCIM, 'content-type': SCIM }),
    body: JSON.stringify({
      schemas: [USER_SCHEMA],
      userName: `new${n}-${Date.now()}@bench.example`,
      userType: 'Practitioner',
      name: { givenName: 'New', familyName: `User${n}` },
      emails: [{ value: `new${n}@bench.example`, type: 'work', primary: true }],
      active: true,
    }),
  });
}

function figures(ms: number[]): LatencyFigures {
  return { count: ms.length, medianMs: median(ms), p99Ms: percentile(ms, 99) };
}

/** Milliseconds `fn` takes. */
export async function timed(fn: () => Promise<unknown>): Promise<number> {
  const start = now();
  await fn();
  return now() - start;
}

/**
 * Latencies over HTTP against a project holding `users` users named `user{i}@bench.example`
 * (`loadUsers`): `filter=userName eq` lookups of random users, creates, and PATCHes (replace
 * `displayName` and `active`) of looked-up users. Requests run one at a time on a keep-alive
 * connection; a few warm-up requests of each kind are not counted.
 */
export async function measureScim(options: {
  scimBase: string;
  token: string;
  users: number;
  lookups: number;
  creates: number;
  patches: number;
  seed?: number;
}): Promise<ScimFigures> {
  const { scimBase, token, users } = options;
  const random = prng(options.seed ?? 7);
  const next = (bound: number): number => Math.floor(random() * bound);
  const headers = bearer(token, { accept: SCIM });
  const ids: string[] = [];

  const lookup = async (): Promise<void> => {
    const userName = `user${next(users)}@bench.example`;
    const filter = encodeURIComponent(`userName eq "${userName}"`);
    const answer = await expectJson(200, `${scimBase}/Users?filter=${filter}`, { headers });
    const body = answer.body as { totalResults: number; Resources: { id: string }[] };
    if (body.totalResults !== 1) throw new Error(`lookup of ${userName}: ${body.totalResults} results`);
    ids.push(body.Resources[0]!.id);
  };
  let created = 0;
  const create = (): Promise<void> => createScimUser(scimBase, token, created++);
  let patched = 0;
  const patch = async (): Promise<void> => {
    const id = ids[patched++ % ids.length]!;
    await expectJson(200, `${scimBase}/Users/${id}`, {
      method: 'PATCH',
      headers: { ...headers, 'content-type': SCIM },
      body: JSON.stringify({
        schemas: [PATCH_SCHEMA],
        Operations: [
          { op: 'replace', path: 'displayName', value: `Patched ${patched}` },
          { op: 'replace', path: 'active', value: patched % 2 === 0 },
        ],
      }),
    });
  };

  const warmUp = Math.min(10, options.lookups);
  for (let i = 0; i < warmUp; i++) {
    await lookup();
    await create();
    await patch();
  }
  const lookups: number[] = [];
  for (let i = 0; i < options.lookups; i++) lookups.push(await timed(lookup));
  const creates: number[] = [];
  for (let i = 0; i < options.creates; i++) creates.push(await timed(create));
  const patches: number[] = [];
  for (let i = 0; i < options.patches; i++) patches.push(await timed(patch));
  return { users, lookup: figures(lookups), create: figures(creates), patch: figures(patches) };
}

export interface ScimPageFigures {
  users: number;
  pageSize: number;
  /** Every page of a walk (`startIndex` 1, 1 + pageSize, …), one at a time. */
  walk: LatencyFigures & { totalMs: number; pages: number };
  /** Median of the walk's first and last tenth of pages: about 1 when a page costs the same wherever it is. */
  firstTenthMedianMs: number;
  lastTenthMedianMs: number;
  /** Pages at random `startIndex`es no walk led to (an offset from the start). */
  jump: LatencyFigures;
}

/**
 * SCIM list paging over HTTP, as an identity provider's import pages: a walk of every page of
 * `GET /Users?startIndex=…&count=pageSize` (each page checked: full, and `totalResults` = users),
 * then `jumps` pages at random `startIndex`es. Requests run one at a time.
 */
export async function measureScimPages(options: {
  scimBase: string;
  token: string;
  users: number;
  pageSize?: number;
  jumps?: number;
  seed?: number;
}): Promise<ScimPageFigures> {
  const { scimBase, token, users } = options;
  const pageSize = options.pageSize ?? 100;
  const headers = bearer(token, { accept: SCIM });
  const random = prng(options.seed ?? 11);
  const page = async (startIndex: number): Promise<number> => {
    const answer = await expectJson(200, `${scimBase}/Users?startIndex=${startIndex}&count=${pageSize}`, {
      headers,
    });
    const body = answer.body as { totalResults: number; Resources?: unknown[] };
    if (body.totalResults < users)
      throw new Error(`page at ${startIndex}: totalResults ${body.totalResults}`);
    return body.Resources?.length ?? 0;
  };
  const walkMs: number[] = [];
  const start = now();
  let seen = 0;
  for (let startIndex = 1; ; startIndex += pageSize) {
    let got = 0;
    walkMs.push(await timed(async () => (got = await page(startIndex))));
    seen += got;
    if (got < pageSize) break;
  }
  const totalMs = now() - start;
  if (seen < users) throw new Error(`the walk saw ${seen} users of ${users}`);
  const tenth = Math.max(1, Math.floor(walkMs.length / 10));
  const jumpMs: number[] = [];
  for (let i = 0; i < (options.jumps ?? 20); i++) {
    const startIndex = 1 + Math.floor(random() * Math.max(1, users - pageSize));
    jumpMs.push(await timed(() => page(startIndex)));
  }
  return {
    users,
    pageSize,
    walk: { ...figures(walkMs), totalMs, pages: walkMs.length },
    firstTenthMedianMs: median(walkMs.slice(0, tenth)),
    lastTenthMedianMs: median(walkMs.slice(-tenth)),
    jump: figures(jumpMs),
  };
}
