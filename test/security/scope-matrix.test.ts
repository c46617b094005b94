import { idFilter, typeSearch } from '../../src/storage/search-request.js';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresStorage } from '../../src/postgres.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { schemaFactory } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { smartUser, userBearer } from '../helpers/smart-users.js';
import { tempDir } from '../helpers/temp-dir.js';

/*
 * Least privilege over every search feature: each case (a chain, a reverse chain, a nested `_has`,
 * includes, `:iterate`, sort, conditional writes, conditional references in a Bundle, a batch
 * search, `_typeFilter`, `$everything`) is asked by each scope shape (type-only v1 read and write,
 * v2 read and write, two types, every type, a patient/ and a user/ SMART user) on the three stores
 * through the whole platform. A case answers 403 exactly when the scopes lack one of the rights it
 * needs (every type it reads through a chain or `_has` needs `search`), and every answer is the same
 * on every store. The stores answer chains differently (PostgreSQL in SQL, the embedded stores from
 * the resolver): the rule must hold whoever answers.
 */

const FHIR = '/fhir/R4';

type Letter = 'c' | 'r' | 'u' | 'd' | 's';

/** What a principal is granted: letters per type (`*`: every type but AuditEvent, which admins alone read). */
type Grants = Record<string, string>;

interface Shape {
  name: string;
  grants: Grants;
  /** A client's requested scope, or a SMART user's token. */
  scope?: string;
  user?: { who: 'patient' | 'doctor'; scopes: string[] };
}

const SHAPES: Shape[] = [
  { name: 'v1 type-only read', scope: 'system/Observation.read', grants: { Observation: 'rs' } },
  { name: 'v1 type-only write', scope: 'system/Observation.write', grants: { Observation: 'cud' } },
  { name: 'v2 type-only read', scope: 'system/Observation.rs', grants: { Observation: 'rs' } },
  { name: 'v2 type-only write', scope: 'system/Observation.cruds', grants: { Observation: 'cruds' } },
  {
    name: 'v1 two types',
    scope: 'system/Observation.read system/Patient.read',
    grants: { Observation: 'rs', Patient: 'rs' },
  },
  { name: 'v2 every type', scope: 'system/*.cruds', grants: { '*': 'cruds' } },
  {
    name: 'patient/ user',
    user: { who: 'patient', scopes: ['patient/Observation.rs', 'launch/patient'] },
    grants: { Observation: 'rs' },
  },
  {
    name: 'patient/ user with Patient',
    user: { who: 'patient', scopes: ['patient/Observation.rs', 'patient/Patient.rs', 'launch/patient'] },
    grants: { Observation: 'rs', Patient: 'rs' },
  },
  {
    name: 'user/ practitioner',
    user: { who: 'doctor', scopes: ['user/Observation.rs'] },
    grants: { Observation: 'rs' },
  },
];

const granted = (shape: Shape, type: string, letter: Letter): boolean =>
  (shape.grants[type] ?? (type === 'AuditEvent' ? '' : (shape.grants['*'] ?? ''))).includes(letter);

const DATA: FhirResource[] = [
  { resourceType: 'Organization', id: 'org-1', name: 'Acme Clinic' },
  { resourceType: 'Practitioner', id: 'pr-1', name: [{ family: 'Doc' }] },
  {
    resourceType: 'Patient',
    id: 'pa',
    name: [{ family: 'Zebrowski' }],
    birthDate: '1970-01-01',
    identifier: [{ system: 'urn:ssn', value: '111' }],
    managingOrganization: { reference: 'Organization/org-1' },
    generalPractitioner: [{ reference: 'Practitioner/pr-1' }],
  },
  {
    resourceType: 'Patient',
    id: 'pb',
    name: [{ family: 'Bauer' }],
    birthDate: '1980-02-02',
    identifier: [{ system: 'urn:ssn', value: '222' }],
  },
  {
    resourceType: 'Observation',
    id: 'oa',
    status: 'final',
    code: { text: 'weight' },
    subject: { reference: 'Patient/pa' },
    performer: [{ reference: 'Practitioner/pr-1' }],
    effectiveDateTime: '2024-01-02',
  },
  {
    resourceType: 'Observation',
    id: 'ob',
    status: 'final',
    code: { text: 'height' },
    subject: { reference: 'Patient/pb' },
    effectiveDateTime: '2024-03-04',
  },
  { resourceType: 'Condition', id: 'ca', subject: { reference: 'Patient/pa' }, code: { text: 'HIV' } },
  // The project's own terminology: what `:in` reads with the caller's right to search ValueSets.
  {
    resourceType: 'CodeSystem',
    id: 'cs',
    url: 'http://acme.org/fhir/CodeSystem/sizes',
    status: 'active',
    content: 'complete',
    concept: [{ code: 'weight' }, { code: 'height' }],
  },
  {
    resourceType: 'ValueSet',
    id: 'vs',
    url: 'http://acme.org/fhir/ValueSet/sizes',
    status: 'active',
    compose: { include: [{ system: 'http://acme.org/fhir/CodeSystem/sizes' }] },
  },
  {
    resourceType: 'DiagnosticReport',
    id: 'dr',
    status: 'final',
    code: { text: 'panel' },
    subject: { reference: 'Patient/pa' },
    result: [{ reference: 'Observation/oa' }],
  },
];

/** One request of the matrix, with the rights it needs and the status it answers when they are held. */
interface Case {
  name: string;
  needs: [string, Letter][];
  /** 403 is expected of SMART users whatever their scopes (system-level export). */
  usersRefused?: boolean;
  /** What a SMART user needs besides `needs`, else 404 (what its view does not reach does not exist). */
  usersReach?: [string, Letter][];
  ok: number;
  send(agent: request.Agent, auth: string): request.Test;
}

const get = (url: string) => (agent: request.Agent, auth: string) =>
  agent.get(`${FHIR}${url}`).set('Authorization', auth);

const json = (method: 'put' | 'post' | 'patch' | 'delete', url: string, body?: unknown, type = FHIR_JSON) =>
  function send(agent: request.Agent, auth: string): request.Test {
    const test = agent[method](`${FHIR}${url}`).set('Authorization', auth);
    return body === undefined ? test : test.type(type).send(JSON.stringify(body));
  };

const observation = (extra: Record<string, unknown> = {}) => ({
  resourceType: 'Observation',
  status: 'final',
  code: { text: 'written' },
  subject: { reference: 'Patient/pa' },
  ...extra,
});

const OBS_S: [string, Letter] = ['Observation', 's'];
const PAT_S: [string, Letter] = ['Patient', 's'];

/** Reads first, then writes (whose effects every store sees alike), the delete last. */
const CASES: Case[] = [
  { name: 'plain search', needs: [OBS_S], ok: 200, send: get('/Observation?_sort=_id') },
  {
    name: 'chain on name',
    needs: [OBS_S, PAT_S],
    ok: 200,
    send: get('/Observation?subject:Patient.name=Zebrowski'),
  },
  {
    name: 'chain on a name that matches nothing',
    needs: [OBS_S, PAT_S],
    ok: 200,
    send: get('/Observation?subject:Patient.name=Nobody'),
  },
  {
    name: 'chain on birthdate',
    needs: [OBS_S, PAT_S],
    ok: 200,
    send: get('/Observation?patient.birthdate=1970-01-01'),
  },
  {
    name: 'chain on identifier',
    needs: [OBS_S, PAT_S],
    ok: 200,
    send: get('/Observation?subject:Patient.identifier=urn:ssn|111'),
  },
  {
    // `subject` without a type tries every target of it that defines `name`: Patient and Location.
    name: 'chain without a type',
    needs: [OBS_S, PAT_S, ['Location', 's']],
    ok: 200,
    send: get('/Observation?subject.name=Zebrowski'),
  },
  {
    name: 'chain two levels deep',
    needs: [OBS_S, PAT_S, ['Organization', 's']],
    ok: 200,
    send: get('/Observation?subject:Patient.organization.name=Acme'),
  },
  {
    name: 'reverse chain',
    needs: [PAT_S, ['Condition', 's']],
    ok: 200,
    send: get('/Patient?_has:Condition:subject:code:text=HIV'),
  },
  {
    name: 'reverse chain on AuditEvent',
    needs: [PAT_S, ['AuditEvent', 's']],
    ok: 200,
    send: get('/Patient?_has:AuditEvent:patient:action=R'),
  },
  {
    name: 'nested reverse chain',
    needs: [['Organization', 's'], PAT_S, ['Condition', 's']],
    ok: 200,
    send: get('/Organization?_has:Patient:organization:_has:Condition:subject:code:text=HIV'),
  },
  {
    name: 'nested reverse chain from the searched type',
    needs: [PAT_S, OBS_S, ['DiagnosticReport', 's']],
    ok: 200,
    send: get('/Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final'),
  },
  {
    name: 'reverse chain through a chain',
    needs: [PAT_S, OBS_S, ['Practitioner', 's']],
    ok: 200,
    send: get('/Patient?_has:Observation:subject:performer:Practitioner.name=Doc'),
  },
  {
    // The R4 value sets are the server's: no right beyond the search's own.
    name: ':in over an R4 value set',
    needs: [OBS_S],
    ok: 200,
    send: get('/Observation?status:in=http://hl7.org/fhir/ValueSet/observation-status'),
  },
  {
    // A project's value set is its data: searching it needs the right to search ValueSets.
    name: ':in over a project value set',
    needs: [OBS_S, ['ValueSet', 's']],
    ok: 200,
    send: get('/Observation?code:not-in=http://acme.org/fhir/ValueSet/sizes'),
  },
  {
    name: ':in over a project value set in a chain',
    needs: [OBS_S, PAT_S, ['ValueSet', 's']],
    ok: 200,
    send: get('/Observation?subject:Patient.gender:in=http://acme.org/fhir/ValueSet/sizes'),
  },
  {
    name: 'POST _search with a chain',
    needs: [OBS_S, PAT_S],
    ok: 200,
    send: (agent, auth) =>
      agent
        .post(`${FHIR}/Observation/_search`)
        .set('Authorization', auth)
        .type('form')
        .send('subject:Patient.name=Zebrowski'),
  },
  {
    // Includes of a type the scopes do not cover are left out with a warning, not refused.
    name: 'include',
    needs: [OBS_S],
    ok: 200,
    send: get('/Observation?_include=Observation:subject&_sort=_id'),
  },
  {
    name: 'include :iterate',
    needs: [OBS_S],
    ok: 200,
    send: get('/Observation?_include=Observation:subject&_include:iterate=Patient:organization&_sort=_id'),
  },
  {
    name: 'revinclude',
    needs: [PAT_S],
    ok: 200,
    send: get('/Patient?_id=pa&_revinclude=Condition:subject&_revinclude=Observation:subject'),
  },
  {
    name: 'revinclude :iterate',
    needs: [OBS_S],
    ok: 200,
    send: get('/Observation?_id=oa&_include=Observation:subject&_revinclude:iterate=Condition:subject'),
  },
  { name: 'sort', needs: [OBS_S], ok: 200, send: get('/Observation?_sort=-date,subject') },
  {
    name: 'sort by a chain is refused',
    needs: [OBS_S],
    ok: 400,
    send: get('/Observation?_sort=subject:Patient.name'),
  },
  {
    name: 'batch search entry with a chain',
    needs: [OBS_S, PAT_S],
    ok: 200,
    send: json('post', '', {
      resourceType: 'Bundle',
      type: 'batch',
      entry: [{ request: { method: 'GET', url: 'Observation?subject:Patient.name=Zebrowski' } }],
    }),
  },
  {
    // A SMART user's view reaches the Patient only with a scope that reads it.
    name: '$everything',
    needs: [OBS_S],
    usersReach: [['Patient', 'r']],
    ok: 200,
    send: get('/Patient/pa/$everything'),
  },
  {
    name: '_typeFilter with a chain two levels deep',
    needs: [
      ['Observation', 'r'],
      ['Patient', 'r'],
      ['Organization', 'r'],
    ],
    usersRefused: true,
    ok: 202,
    send: (agent, auth) =>
      agent
        .get(`${FHIR}/$export`)
        .query({
          _type: 'Observation',
          _typeFilter: 'Observation?subject:Patient.organization.name=Nobody',
        })
        .set('Authorization', auth)
        .set('Accept', FHIR_JSON)
        .set('Prefer', 'respond-async'),
  },
  {
    name: 'conditional create with a chain',
    needs: [['Observation', 'c'], OBS_S, PAT_S],
    ok: 200,
    send: (agent, auth) =>
      json(
        'post',
        '/Observation',
        observation(),
      )(agent, auth).set('If-None-Exist', 'subject:Patient.name=Zebrowski'),
  },
  {
    name: 'conditional update with a chain',
    needs: [['Observation', 'u'], OBS_S, PAT_S],
    ok: 200,
    send: json('put', '/Observation?subject:Patient.birthdate=1970-01-01', observation({ id: 'oa' })),
  },
  {
    name: 'conditional patch with a chain',
    needs: [['Observation', 'u'], OBS_S, PAT_S],
    ok: 200,
    send: json(
      'patch',
      '/Observation?subject:Patient.name=Zebrowski',
      [{ op: 'replace', path: '/status', value: 'amended' }],
      'application/json-patch+json',
    ),
  },
  {
    name: 'transaction with a conditional reference through a chain',
    needs: [['Observation', 'c'], PAT_S, ['Organization', 's']],
    ok: 200,
    send: json('post', '', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: observation({ subject: { reference: 'Patient?organization.name=Acme' } }),
          request: { method: 'POST', url: 'Observation' },
        },
      ],
    }),
  },
  {
    name: 'transaction conditional update with a chain',
    needs: [['Observation', 'u'], OBS_S, PAT_S],
    ok: 200,
    send: json('post', '', {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        {
          resource: observation({ id: 'ob', subject: { reference: 'Patient/pb' } }),
          request: { method: 'PUT', url: 'Observation?subject:Patient.name=Bauer' },
        },
      ],
    }),
  },
  {
    name: 'conditional delete with a chain',
    needs: [['Observation', 'd'], OBS_S, PAT_S],
    ok: 204,
    send: json('delete', '/Observation?_id=oa&subject:Patient.name=Zebrowski'),
  },
];

/** What is compared across stores: the status, and what the body shows. */
interface Answer {
  status: number;
  /** Searchset and batch/transaction entries: each `Type/id` (with its mode) or entry status, sorted. */
  entries?: string[];
  total?: number;
  /** An OperationOutcome's issue codes (errors and warnings). */
  issues?: string[];
}

interface Body {
  resourceType?: string;
  issue?: { code: string }[];
  type?: string;
  total?: number;
  entry?: {
    resource?: { resourceType: string; id?: string; issue?: { code: string }[] };
    search?: { mode?: string };
    response?: { status?: string };
  }[];
}

/** Ids the platform assigns (a transaction's create) differ from store to store. */
const FIXED_IDS = new Set(DATA.map((r) => `${r.resourceType}/${r.id}`));

function answerOf(res: request.Response): Answer {
  const body = res.body as Body | undefined;
  const answer: Answer = { status: res.status };
  if (body?.resourceType === 'OperationOutcome') answer.issues = (body.issue ?? []).map((i) => i.code);
  if (body?.resourceType !== 'Bundle') return answer;
  if (body.total !== undefined) answer.total = body.total;
  answer.entries = (body.entry ?? [])
    .map((e) => {
      if (e.response) return `response ${e.response.status ?? ''}`;
      const r = e.resource;
      if (!r) return 'empty';
      if (r.resourceType === 'OperationOutcome')
        return `outcome ${(r.issue ?? []).map((i) => i.code).join(',')}`;
      const key = `${r.resourceType}/${r.id ?? ''}`;
      return `${e.search?.mode ?? ''} ${FIXED_IDS.has(key) ? key : r.resourceType}`;
    })
    .sort();
  return answer;
}

/** The status a case must answer with `shape`'s scopes: 403 when one right is missing. */
function expectedStatus(c: Case, shape: Shape): number {
  if (c.usersRefused && shape.user) return 403;
  if (!c.needs.every(([type, letter]) => granted(shape, type, letter))) return 403;
  const reaches = !shape.user || (c.usersReach ?? []).every(([type, letter]) => granted(shape, type, letter));
  return reaches ? c.ok : 404;
}

/** The status that counts of an answer: a batch's (or transaction's) only entry's. */
function statusOf(c: Case, answer: Answer): number {
  if (c.name.startsWith('batch') && answer.status === 200) {
    return Number(answer.entries?.[0]?.split(' ')[1] ?? 0);
  }
  return answer.status;
}

interface StoreApp {
  name: string;
  t: PlatformTestApp;
  projectId: string;
  tokens: Map<string, string>;
}

const stores: { name: string; open: () => Storage | Promise<Storage> }[] = [
  { name: 'memory', open: () => memoryStorage() },
  { name: 'file', open: () => fileStorage({ dir: tempDir('fpk-scope-matrix-'), durability: 'write' }) },
];
const url = postgresTestUrl('scope matrix: PostgreSQL');
if (url) {
  const schema = schemaFactory(url);
  stores.push({
    name: 'PostgreSQL',
    open: () => postgresStorage({ connectionString: url, schema: schema() }),
  });
}

async function openStore(name: string, open: () => Storage | Promise<Storage>): Promise<StoreApp> {
  const t = await createPlatformApp({}, await open());
  const projectId = await t.initProject('Scope matrix');
  await t.storage.updateProject(projectId, { strictMode: false });
  await t.storage.writeResources(
    projectId,
    DATA.map((resource) => ({ op: 'update', resource: resource as FhirResource & { id: string } })),
  );
  const client = await t.newClient(projectId, { name: 'scoped', scope: 'system/*.*' });
  const app = await t.newClient(projectId, {
    name: 'smart app',
    scope: 'patient/*.* user/*.* launch/patient openid fhirUser',
  });
  const users = {
    patient: await smartUser(t.storage, projectId, { id: 'u-pat', userType: 'Patient', profileId: 'pa' }),
    doctor: await smartUser(t.storage, projectId, {
      id: 'u-doc',
      userType: 'Practitioner',
      profileId: 'pr-1',
    }),
  };
  const tokens = new Map<string, string>();
  for (const shape of SHAPES) {
    const token = shape.user
      ? await userBearer(
          t.storage,
          app.id,
          users[shape.user.who],
          shape.user.scopes,
          shape.user.who === 'patient' ? 'pa' : undefined,
        )
      : await t.bearer(client.id, client.secret, shape.scope);
    tokens.set(shape.name, token);
  }
  return { name, t, projectId, tokens };
}

describe('scope matrix: every search feature, every scope shape, every store', () => {
  const apps: StoreApp[] = [];
  beforeAll(async () => {
    for (const { name, open } of stores) apps.push(await openStore(name, open));
  });
  afterAll(async () => {
    for (const { t } of apps) await t.close();
  });

  it('first, the every-type shape finds through chains what the refused shapes ask about', async () => {
    const wide = SHAPES.find((s) => s.name === 'v2 every type')!;
    for (const { t, tokens } of apps) {
      const auth = tokens.get(wide.name)!;
      const agent = request.agent(t.app);
      const byName = await agent
        .get(`${FHIR}/Observation?subject:Patient.name=Bauer`)
        .set('Authorization', auth);
      expect(answerOf(byName).entries).toEqual(['match Observation/ob']);
      const hiv = await agent
        .get(`${FHIR}/Patient?_has:Condition:subject:code:text=HIV`)
        .set('Authorization', auth);
      expect(answerOf(hiv).entries).toEqual(['match Patient/pa']);
      const nested = await agent
        .get(`${FHIR}/Organization?_has:Patient:organization:_has:Condition:subject:code:text=HIV`)
        .set('Authorization', auth);
      expect(answerOf(nested).entries).toEqual(['match Organization/org-1']);
      const report = await agent
        .get(`${FHIR}/Patient?_has:Observation:subject:_has:DiagnosticReport:result:status=final`)
        .set('Authorization', auth);
      expect(answerOf(report).entries).toEqual(['match Patient/pa']);
    }
  });

  // In order: the writes of a case change what later cases see, alike on every store.
  for (const c of CASES) {
    it(c.name, async () => {
      const failures: string[] = [];
      for (const shape of SHAPES) {
        const answers: Answer[] = [];
        for (const { t, tokens } of apps) {
          answers.push(answerOf(await c.send(request.agent(t.app), tokens.get(shape.name)!)));
        }
        const expected = expectedStatus(c, shape);
        apps.forEach(({ name }, i) => {
          const got = statusOf(c, answers[i]!);
          if (got !== expected) failures.push(`${shape.name} on ${name}: ${got}, expected ${expected}`);
        });
        const [first, ...others] = answers;
        others.forEach((answer, i) => {
          if (JSON.stringify(answer) !== JSON.stringify(first))
            failures.push(
              `${shape.name}: ${apps[i + 1]!.name} answered ${JSON.stringify(answer)}, ${apps[0]!.name} ${JSON.stringify(first)}`,
            );
        });
      }
      expect(failures).toEqual([]);
    });
  }

  it('a refused conditional delete deleted nothing; the allowed one deleted its match', async () => {
    for (const { t, projectId } of apps) {
      const left = await t.storage.searchResources(projectId, 'Observation', {
        search: typeSearch('Observation', [idFilter(['oa', 'ob'])]),
      });
      // `oa` went with the every-type shape's delete (the last case), `ob` stays.
      expect(left.resources.map((r) => r.id)).toEqual(['ob']);
    }
  });
});
