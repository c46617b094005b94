import type { Server } from 'node:http';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPatientCompartmentType, patientCompartmentIds } from '../../src/fhir/compartment.js';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { postgresStorage } from '../../src/postgres.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { memoryStorage } from '../../src/stores.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { schemaFactory } from '../helpers/pg-schema.js';
import { postgresTestUrl } from '../helpers/postgres.js';
import { smartUser, userBearer } from '../helpers/smart-users.js';

// Walks GET /metadata with a patient-scoped user token (a Patient user, `patient/*.*`, launch patient
// `pat-a`) and tries every interaction, search parameter and operation it lists, on a project with,
// for every type, one resource in pat-a's compartment (`own-<Type>`) and one in pat-b's
// (`other-<Type>`). No answer may hold a resource outside pat-a's compartment or naming pat-b, and
// afterwards every resource of pat-b is as it was. Some 3,500 requests.
const FHIR = '/fhir/R4';
const OWN = 'pat-a';
const OTHER = 'pat-b';

interface Capability {
  type: string;
  interaction: { code: string }[];
  searchParam?: { name: string; type: string }[];
  conditionalCreate?: boolean;
  conditionalUpdate?: boolean;
  conditionalDelete?: string;
}
interface Rest {
  resource: Capability[];
  interaction: { code: string }[];
  operation?: { name: string; definition: string }[];
}

/** A resource of `type` referencing Patient/`patient` through every compartment element of R4. */
function resourceOf(type: string, id: string, patient: string): FhirResource & { id: string } {
  const ref = { reference: `Patient/${patient}` };
  return {
    resourceType: type,
    id,
    ...Object.fromEntries(
      [
        'subject',
        'patient',
        'beneficiary',
        'individual',
        'candidate',
        'actor',
        'deliverTo',
        'policyHolder',
        'subscriber',
        'author',
        'recorder',
        'asserter',
        'sender',
        'recipient',
        'requester',
        'receiver',
        'payor',
        'source',
      ].map((name) => [name, ref]),
    ),
    target: [ref],
    performer: { ...ref, actor: ref },
    member: [{ entity: ref }],
    participant: [{ actor: ref, member: ref }],
    link: [{ other: ref, target: ref }],
    agent: [{ who: ref }],
    payee: { party: ref },
    attester: [{ party: ref }],
    entity: [{ what: ref }],
    activity: [{ detail: { performer: ref } }],
    action: [{ participant: ref }],
  };
}

function valueOf(type: string, target: string | undefined, resourceType: string): string {
  switch (type) {
    case 'number':
      return '1';
    case 'date':
      return 'ge2000-01-01';
    case 'string':
      return 'a';
    case 'token':
      return 'http://example.org|x';
    case 'reference':
      return target === 'Patient' || target === undefined ? `Patient/${OTHER}` : `${target}/other-${target}`;
    case 'quantity':
      return '1||mg';
    case 'uri':
      return 'http://example.org/x';
    default:
      return `other-${resourceType}`;
  }
}

const walk = (store: string, open: () => Storage | Promise<Storage>) =>
  describe(`every capability, walked with a patient-scoped user token (${store} store)`, () => {
    let t: PlatformTestApp;
    let server: Server;
    let auth: string;
    let admin: string;
    let projectId: string;
    let rest: Rest;
    let registry: SearchRegistry;
    const leaks: string[] = [];
    const writes: string[] = [];
    let requests = 0;

    beforeAll(async () => {
      t = await createPlatformApp({}, await open());
      projectId = await t.initProject('Walk');
      await t.storage.updateProject(projectId, { strictMode: false });
      const setup = await t.newClient(projectId, { name: 'setup', scope: 'system/*.*', admin: true });
      admin = await t.bearer(setup.id, setup.secret, 'project:admin system/*.*');
      const app = await t.newClient(projectId, { name: 'app', scope: 'patient/*.* launch/patient' });
      const user = await smartUser(t.storage, projectId, { id: 'u-a', userType: 'Patient', profileId: OWN });
      auth = await userBearer(t.storage, app.id, user, ['patient/*.*'], OWN);
      server = t.app.listen(0);
      registry = await loadSearchRegistry();
      rest = ((await request(server).get(`${FHIR}/metadata`)).body as { rest: Rest[] }).rest[0]!;
      const data = [
        { resourceType: 'Patient', id: OWN },
        { resourceType: 'Patient', id: OTHER },
        ...rest.resource.flatMap((c) => [
          resourceOf(c.type, `own-${c.type}`, OWN),
          resourceOf(c.type, `other-${c.type}`, OTHER),
        ]),
      ];
      await t.storage.writeResources(
        projectId,
        data.map((resource) => ({ op: 'update' as const, resource })),
      );
      // The setup does what it says: each compartment type's resources are in the intended compartments.
      for (const c of rest.resource) {
        if (!isPatientCompartmentType(c.type)) continue;
        expect(patientCompartmentIds(resourceOf(c.type, 'x', OWN)), c.type).toContain(OWN);
        expect(patientCompartmentIds(resourceOf(c.type, 'x', OTHER)), c.type).not.toContain(OWN);
      }
    });
    afterAll(async () => {
      if (server) await new Promise((resolve) => server.close(resolve));
      await t?.close();
    });

    /** Every resource of an answer (Bundles, nested ones of batch answers, included), as JSON. */
    function resourcesOf(body: unknown): FhirResource[] {
      const out: FhirResource[] = [];
      const visit = (value: unknown) => {
        const r = value as { resourceType?: string; entry?: { resource?: unknown }[] } | null;
        if (!r || typeof r !== 'object' || typeof r.resourceType !== 'string') return;
        if (r.resourceType === 'Bundle') for (const e of r.entry ?? []) visit(e.resource);
        else if (r.resourceType !== 'OperationOutcome') out.push(r as FhirResource);
      };
      visit(body);
      return out;
    }

    /** Sends as the user; records any resource of the answer outside pat-a's compartment. */
    async function attempt(
      what: string,
      send: (agent: request.Agent) => request.Test,
    ): Promise<request.Response> {
      requests++;
      const res = await send(request.agent(server).set('Authorization', auth));
      if (res.status >= 500) leaks.push(`${what}: ${res.status}`);
      let body: unknown;
      try {
        body = JSON.parse(res.text) as unknown;
      } catch {
        body = undefined;
      }
      for (const resource of resourcesOf(body)) {
        const text = JSON.stringify(resource);
        if (
          !patientCompartmentIds(resource).includes(OWN) ||
          text.includes(OTHER) ||
          String(resource.id).startsWith('other-')
        )
          leaks.push(`${what}: ${resource.resourceType}/${String(resource.id)}`);
      }
      return res;
    }

    /** A write that must not succeed against pat-b's resources. */
    async function refused(what: string, send: (agent: request.Agent) => request.Test): Promise<void> {
      const res = await attempt(what, send);
      if (res.status < 400) writes.push(`${what}: ${res.status}`);
    }

    const json = (test: request.Test, body: unknown): request.Test =>
      test.type(FHIR_JSON).send(JSON.stringify(body));

    it('answers every interaction of every type without a resource of another patient', async () => {
      for (const cap of rest.resource) {
        const { type } = cap;
        const other = `other-${type}`;
        const own = `own-${type}`;
        for (const { code } of cap.interaction) {
          const what = `${type} ${code}`;
          switch (code) {
            case 'read': {
              const mine = await attempt(what, (a) => a.get(`${FHIR}/${type}/${own}`));
              // The user reads its own compartment (AuditEvent: never a user's).
              const expected =
                isPatientCompartmentType(type) && type !== 'AuditEvent'
                  ? 200
                  : type === 'AuditEvent'
                    ? 403
                    : 404;
              if (mine.status !== expected)
                writes.push(`${what} of its own: ${mine.status}, want ${expected}`);
              const theirs = await attempt(what, (a) => a.get(`${FHIR}/${type}/${other}`));
              const hidden = type === 'AuditEvent' ? 403 : 404;
              if (theirs.status !== hidden)
                writes.push(`${what} of another: ${theirs.status}, want ${hidden}`);
              break;
            }
            case 'vread':
              await refused(what, (a) => a.get(`${FHIR}/${type}/${other}/_history/1`));
              break;
            case 'history-instance':
              await refused(what, (a) => a.get(`${FHIR}/${type}/${other}/_history`));
              break;
            case 'history-type':
              await attempt(what, (a) => a.get(`${FHIR}/${type}/_history?_count=1000`));
              break;
            case 'search-type':
              await attempt(what, (a) => a.get(`${FHIR}/${type}?_count=1000`));
              break;
            case 'update':
              await refused(what, (a) =>
                json(a.put(`${FHIR}/${type}/${other}`), resourceOf(type, other, OWN)),
              );
              break;
            case 'patch':
              await refused(what, (a) =>
                a
                  .patch(`${FHIR}/${type}/${other}`)
                  .type('application/json-patch+json')
                  .send(JSON.stringify([{ op: 'add', path: '/language', value: 'en' }])),
              );
              break;
            case 'create': {
              const { id: _id, ...body } = resourceOf(type, 'x', OTHER);
              await refused(what, (a) => json(a.post(`${FHIR}/${type}`), body));
              break;
            }
            case 'delete':
              await refused(what, (a) => a.delete(`${FHIR}/${type}/${other}`));
              break;
            default:
              writes.push(`${what}: the walk does not know this interaction`);
          }
        }
        if (cap.conditionalCreate) {
          // obs-b is no match the user can see: the create is judged on its own content (pat-b's: 403).
          const { id: _id, ...body } = resourceOf(type, 'x', OTHER);
          await refused(`${type} conditional create`, (a) =>
            json(a.post(`${FHIR}/${type}`).set('If-None-Exist', `_id=${other}`), body),
          );
        }
        if (cap.conditionalUpdate) {
          await refused(`${type} conditional update`, (a) =>
            json(a.put(`${FHIR}/${type}?_id=${other}`), resourceOf(type, other, OWN)),
          );
        }
        if (cap.conditionalDelete && cap.conditionalDelete !== 'not-supported') {
          await attempt(`${type} conditional delete`, (a) => a.delete(`${FHIR}/${type}?_id=${other}`));
        }
      }
      expect(leaks).toEqual([]);
      expect(writes).toEqual([]);
    }, 300_000);

    it('answers every search parameter, with includes, without a resource of another patient', async () => {
      for (const cap of rest.resource) {
        const { type } = cap;
        for (const param of cap.searchParam ?? []) {
          const def = registry.get(type, param.name);
          let value = param.name === '_id' ? `other-${type}` : valueOf(param.type, def?.targets[0], type);
          if (param.type === 'composite' && def)
            value = def.components.map((c) => valueOf(c.type, undefined, type)).join('$');
          const include = param.type === 'reference' ? `&_include=${type}:${param.name}` : '';
          await attempt(`${type}?${param.name}`, (a) =>
            a
              .get(`${FHIR}/${type}`)
              .query(`${param.name}=${encodeURIComponent(value)}${include}`)
              .set('Prefer', 'handling=lenient'),
          );
          if (param.type === 'reference')
            await attempt(`${type}?_include=${param.name}`, (a) =>
              a.get(`${FHIR}/${type}?_include=${type}:${param.name}&_count=1000`),
            );
        }
      }
      // Reverse includes onto the user's own Patient, from every type's reference parameters.
      for (const cap of rest.resource) {
        for (const param of cap.searchParam ?? []) {
          if (param.type !== 'reference') continue;
          await attempt(`Patient?_revinclude=${cap.type}:${param.name}`, (a) =>
            a.get(
              `${FHIR}/Patient?_revinclude=${cap.type}:${param.name}&_revinclude:iterate=${cap.type}:${param.name}`,
            ),
          );
        }
      }
      expect(leaks).toEqual([]);
    }, 300_000);

    it('answers the system interactions and operations without a resource of another patient', async () => {
      await attempt('history-system', (a) => a.get(`${FHIR}/_history?_count=1000`));
      await attempt('Patient/$everything', (a) => a.get(`${FHIR}/Patient/$everything?_count=1000`));
      await refused('Patient/pat-b/$everything', (a) => a.get(`${FHIR}/Patient/${OTHER}/$everything`));
      await attempt('Patient/pat-a/$everything', (a) =>
        a.get(`${FHIR}/Patient/${OWN}/$everything?_count=1000`),
      );
      await refused('system $export', (a) =>
        a.get(`${FHIR}/$export`).set('Prefer', 'respond-async').set('Accept', FHIR_JSON),
      );
      // A SMART user never imports (its writes would reach past its compartment).
      await refused('system $import', (a) =>
        json(a.post(`${FHIR}/$import`).set('Prefer', 'respond-async'), {
          resourceType: 'Parameters',
          parameter: [{ name: 'manifestUrl', valueUri: 'http://127.0.0.1:9/$export-status/x' }],
        }),
      );
      const batch = await attempt('batch', (a) =>
        json(a.post(FHIR), {
          resourceType: 'Bundle',
          type: 'batch',
          entry: rest.resource.map((c) => ({ request: { method: 'GET', url: `${c.type}/other-${c.type}` } })),
        }),
      );
      expect(batch.status).toBe(200);
      const statuses = (batch.body.entry as { response: { status: string } }[]).map((e) => e.response.status);
      expect(statuses.filter((s) => !/^40[34]/.test(s))).toEqual([]);
      for (const op of rest.operation ?? [])
        if (!/export|everything|bulk-import/.test(op.definition))
          writes.push(`system operation ${op.name}: not walked`);
      expect(leaks).toEqual([]);
      expect(writes).toEqual([]);
    });

    it('leaves every resource of the other patient as it was', async () => {
      const changed: string[] = [];
      for (const c of rest.resource) {
        // AuditEvent is never written through the API (405), and the admin token does not read it.
        if (c.type === 'AuditEvent') continue;
        const res = await request(server)
          .get(`${FHIR}/${c.type}/other-${c.type}`)
          .set('Authorization', admin);
        if (res.status !== 200 || res.body.meta.versionId !== '1')
          changed.push(`${c.type}: ${res.status} v${res.body.meta?.versionId}`);
      }
      expect(changed).toEqual([]);
      console.info(`user scope walk: ${requests} requests, ${rest.resource.length} types`);
    });
  });

walk('memory', () => memoryStorage());
// PostgreSQL answers searches, chains and `_has` in SQL: walked as well when a database is set.
const url = postgresTestUrl('user scope walk: PostgreSQL');
if (url) {
  const newSchema = schemaFactory(url);
  walk('PostgreSQL', () => postgresStorage({ connectionString: url, schema: newSchema() }));
}
