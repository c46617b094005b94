import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FhirResource } from '../../src/storage/types.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';
import { forEachStore } from '../helpers/each-store.js';
import { smartUser, userBearer } from '../helpers/smart-users.js';
import { eventually } from '../helpers/eventually.js';

// What a user signed in through a SMART app sees and may change, on every kind of FHIR route, with
// real user access tokens through the whole platform (docs/auth.md "Scopes for users").
const FHIR = '/fhir/R4';
const APP_SCOPE = 'patient/*.* user/*.* launch/patient openid fhirUser';

forEachStore('SMART user scopes', (store, open) =>
  describe(`SMART user scopes (${store} store)`, () => {
    let t: PlatformTestApp;
    let projectId: string;
    let appId: string;
    let admin: string;
    const users: Record<string, { id: string; fhirUser: string }> = {};

    const DATA: FhirResource[] = [
      { resourceType: 'Patient', id: 'pat-a', name: [{ family: 'Ames' }] },
      { resourceType: 'Patient', id: 'pat-b', name: [{ family: 'Bell' }] },
      {
        resourceType: 'Observation',
        id: 'obs-a',
        status: 'final',
        subject: { reference: 'Patient/pat-a' },
        hasMember: [{ reference: 'Observation/obs-b' }],
      },
      // pat-b's, about pat-a (`focus` is no compartment element).
      {
        resourceType: 'Observation',
        id: 'obs-x',
        status: 'final',
        subject: { reference: 'Patient/pat-b' },
        focus: [{ reference: 'Patient/pat-a' }],
      },
      { resourceType: 'Observation', id: 'obs-b', status: 'final', subject: { reference: 'Patient/pat-b' } },
      { resourceType: 'Condition', id: 'cond-b', subject: { reference: 'Patient/pat-b' } },
      { resourceType: 'RelatedPerson', id: 'rp-1', patient: { reference: 'Patient/pat-b' } },
      { resourceType: 'Practitioner', id: 'pr-1', name: [{ family: 'Doc' }] },
      { resourceType: 'Medication', id: 'med-1' },
      {
        resourceType: 'Group',
        id: 'grp',
        type: 'person',
        actual: true,
        member: [{ entity: { reference: 'Patient/pat-a' } }, { entity: { reference: 'Patient/pat-b' } }],
      },
    ];

    beforeAll(async () => {
      t = await createPlatformApp({}, await open());
      projectId = await t.initProject('Users');
      await t.storage.updateProject(projectId, { strictMode: false });
      const setup = await t.newClient(projectId, { name: 'setup', scope: 'system/*.*', admin: true });
      admin = await t.bearer(setup.id, setup.secret, 'project:admin system/*.*');
      appId = (await t.newClient(projectId, { name: 'smart app', scope: APP_SCOPE })).id;
      await t.storage.writeResources(
        projectId,
        DATA.map((resource) => ({ op: 'update', resource: resource as FhirResource & { id: string } })),
      );
      users.patient = await smartUser(t.storage, projectId, {
        id: 'u-pat',
        userType: 'Patient',
        profileId: 'pat-a',
      });
      users.related = await smartUser(t.storage, projectId, {
        id: 'u-rel',
        userType: 'RelatedPerson',
        profileId: 'rp-1',
      });
      users.doctor = await smartUser(t.storage, projectId, {
        id: 'u-doc',
        userType: 'Practitioner',
        profileId: 'pr-1',
      });
    });
    afterAll(async () => {
      await t.close();
    });

    const token = (who: string, scopes: string[], patient?: string) =>
      userBearer(t.storage, appId, users[who]!, scopes, patient);

    const get = (auth: string, url: string) => request(t.app).get(`${FHIR}${url}`).set('Authorization', auth);
    const send = (auth: string, method: 'post' | 'put', url: string, body: unknown) => {
      const agent = request(t.app);
      const test = method === 'post' ? agent.post(`${FHIR}${url}`) : agent.put(`${FHIR}${url}`);
      return test.set('Authorization', auth).type(FHIR_JSON).send(JSON.stringify(body));
    };

    /** `Type/id` of every resource of a Bundle (nested Bundles of batch responses included). */
    function refs(body: unknown): string[] {
      const out: string[] = [];
      const visit = (resource: { resourceType?: string; id?: string; entry?: { resource?: unknown }[] }) => {
        if (resource.resourceType === 'Bundle') {
          for (const e of resource.entry ?? []) if (e.resource) visit(e.resource);
        } else if (resource.resourceType !== 'OperationOutcome') {
          out.push(`${resource.resourceType}/${resource.id}`);
        }
      };
      visit(body as never);
      return out.sort();
    }

    const FIXTURES = new Set(DATA.map((r) => `${r.resourceType}/${r.id}`));

    /** The fixtures among `refs(body)` (other tests write resources of their own). */
    const fixtures = (body: unknown): string[] => refs(body).filter((r) => FIXTURES.has(r));

    describe('a Patient user', () => {
      let auth: string;
      beforeAll(async () => {
        auth = await token('patient', ['user/*.rs']);
      });

      it('reads and searches its own compartment only, with right totals', async () => {
        const obs = await get(auth, '/Observation?_total=accurate');
        expect(obs.status).toBe(200);
        expect(refs(obs.body)).toEqual(['Observation/obs-a']);
        expect(obs.body.total).toBe(1);
        expect((await get(auth, '/Observation?_summary=count')).body.total).toBe(1);
        expect(refs((await get(auth, '/Patient')).body)).toEqual(['Patient/pat-a']);
        expect((await get(auth, '/Observation?subject=Patient/pat-b&_total=accurate')).body.total).toBe(0);
        expect((await get(auth, '/Observation?_id=obs-b&_total=accurate')).body.total).toBe(0);
        expect((await get(auth, '/Observation/obs-a')).status).toBe(200);
        expect((await get(auth, '/Patient/pat-a')).status).toBe(200);
      });

      it('gets 404, not 403, for a resource outside it (existence does not leak)', async () => {
        for (const url of [
          '/Observation/obs-b',
          '/Patient/pat-b',
          '/Medication/med-1',
          '/Practitioner/pr-1',
        ]) {
          const res = await get(auth, url);
          expect(res.status, url).toBe(404);
        }
        expect((await get(auth, '/Observation/obs-b/_history/1')).status).toBe(404);
        expect((await get(auth, '/Observation/obs-b/_history')).status).toBe(404);
        expect((await get(auth, '/Observation/none/_history')).status).toBe(404);
      });

      it('gets only its compartment from _include, _revinclude and chains', async () => {
        const rev = await get(auth, '/Patient?_revinclude=Observation:subject&_revinclude=Condition:subject');
        expect(refs(rev.body)).toEqual(['Observation/obs-a', 'Patient/pat-a']);
        const inc = await get(auth, '/Observation?_include=Observation:subject');
        expect(refs(inc.body)).toEqual(['Observation/obs-a', 'Patient/pat-a']);
        // Own resources pointing outside, and outside ones pointing at its own: neither comes in.
        expect(fixtures((await get(auth, '/Observation?_include=Observation:has-member')).body)).toEqual([
          'Observation/obs-a',
        ]);
        expect(fixtures((await get(auth, '/Patient?_revinclude=Observation:focus')).body)).toEqual([
          'Patient/pat-a',
        ]);
        expect((await get(auth, '/Observation?focus=Patient/pat-a&_total=accurate')).body.total).toBe(0);
        // Neither do chains and _has test resources outside (on every store, PostgreSQL's SQL included).
        expect(
          (await get(auth, '/Observation?has-member:Observation.status=final&_total=accurate')).body.total,
        ).toBe(0);
        expect(
          (await get(auth, '/Observation?has-member:Observation.subject=Patient/pat-b&_total=accurate')).body
            .total,
        ).toBe(0);
        expect(
          (await get(auth, '/Patient?_has:Observation:focus:status=final&_total=accurate')).body.total,
        ).toBe(0);
        expect(
          (await get(auth, '/Patient?_has:Observation:subject:status=final&_total=accurate')).body.total,
        ).toBe(1);
        const chained = await get(auth, '/Observation?subject:Patient.family=Bell&_total=accurate');
        expect(chained.body.total).toBe(0);
        const reverse = await get(auth, '/Patient?_has:Observation:subject:status=final');
        expect(refs(reverse.body)).toEqual(['Patient/pat-a']);
      });

      it('sees only its own versions in the type and system histories', async () => {
        expect(fixtures((await get(auth, '/Observation/_history')).body)).toEqual(['Observation/obs-a']);
        // The Group is in the compartment of each of its members (R4 CompartmentDefinition "Patient").
        const all = fixtures((await get(auth, '/_history?_count=100')).body);
        expect(all).toEqual(['Group/grp', 'Observation/obs-a', 'Patient/pat-a']);
      });

      it('$everything holds its own compartment only', async () => {
        expect((await get(auth, '/Patient/pat-b/$everything')).status).toBe(404);
        const own = await get(auth, '/Patient/pat-a/$everything');
        expect(own.status).toBe(200);
        const mine = ['Group/grp', 'Observation/obs-a', 'Patient/pat-a'];
        expect(fixtures(own.body)).toEqual(mine);
        expect(fixtures((await get(auth, '/Patient/$everything')).body)).toEqual(mine);
      });

      it('a batch answers 404 for entries outside it', async () => {
        const res = await send(auth, 'post', '', {
          resourceType: 'Bundle',
          type: 'batch',
          entry: [
            { request: { method: 'GET', url: 'Observation/obs-b' } },
            { request: { method: 'GET', url: 'Observation/obs-a' } },
            { request: { method: 'GET', url: 'Observation?subject=Patient/pat-b' } },
            { request: { method: 'GET', url: 'Observation/obs-b/_history' } },
          ],
        });
        expect(res.status).toBe(200);
        const entries = res.body.entry as { response: { status: string } }[];
        expect(entries.map((e) => e.response.status.slice(0, 3))).toEqual(['404', '200', '200', '404']);
        expect(refs(res.body)).toEqual(['Observation/obs-a']);
      });

      it('never reads the audit trail', async () => {
        const all = await token(
          'patient',
          ['user/*.*', 'user/AuditEvent.rs', 'patient/AuditEvent.rs'],
          'pat-a',
        );
        expect((await get(all, '/AuditEvent')).status).toBe(403);
      });
    });

    describe('writes of a Patient user', () => {
      let auth: string;
      beforeAll(async () => {
        auth = await token('patient', ['user/*.cruds']);
      });

      it('creates and updates inside its compartment; 403 for a write that would put data outside it', async () => {
        const own = await send(auth, 'post', '/Observation', {
          resourceType: 'Observation',
          status: 'final',
          subject: { reference: 'Patient/pat-a' },
        });
        expect(own.status).toBe(201);
        const other = await send(auth, 'post', '/Observation', {
          resourceType: 'Observation',
          status: 'final',
          subject: { reference: 'Patient/pat-b' },
        });
        expect(other.status).toBe(403);
        expect((await send(auth, 'post', '/Medication', { resourceType: 'Medication' })).status).toBe(403);
        const moved = await send(auth, 'put', `/Observation/${own.body.id}`, {
          resourceType: 'Observation',
          id: own.body.id,
          status: 'final',
          subject: { reference: 'Patient/pat-b' },
        });
        expect(moved.status).toBe(403);
        const conditional = await request(t.app)
          .post(`${FHIR}/Observation`)
          .set('Authorization', auth)
          .set('If-None-Exist', '_id=obs-b')
          .type(FHIR_JSON)
          .send(
            JSON.stringify({
              resourceType: 'Observation',
              status: 'final',
              subject: { reference: 'Patient/pat-a' },
            }),
          );
        // obs-b is not a match it can see: a new resource of its own.
        expect(conditional.status).toBe(201);
        expect(conditional.body.id).not.toBe('obs-b');
      });

      it('cannot update, patch or delete a resource outside it (404), nor through conditions or Bundles', async () => {
        const body = {
          resourceType: 'Observation',
          id: 'obs-b',
          status: 'amended',
          subject: { reference: 'Patient/pat-a' },
        };
        expect((await send(auth, 'put', '/Observation/obs-b', body)).status).toBe(404);
        const patch = await request(t.app)
          .patch(`${FHIR}/Observation/obs-b`)
          .set('Authorization', auth)
          .type('application/json-patch+json')
          .send(JSON.stringify([{ op: 'replace', path: '/status', value: 'amended' }]));
        expect(patch.status).toBe(404);
        expect(
          (await request(t.app).delete(`${FHIR}/Observation/obs-b`).set('Authorization', auth)).status,
        ).toBe(404);
        const conditionalDelete = await request(t.app)
          .delete(`${FHIR}/Observation?_id=obs-b`)
          .set('Authorization', auth);
        expect(conditionalDelete.status).toBe(204);
        const conditionalUpdate = await send(auth, 'put', '/Observation?_id=obs-b', body);
        expect(conditionalUpdate.status).toBe(404);
        const transaction = await send(auth, 'post', '', {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            {
              resource: {
                resourceType: 'Observation',
                status: 'final',
                subject: { reference: 'Patient/pat-a' },
              },
              request: { method: 'POST', url: 'Observation' },
            },
            {
              resource: { resourceType: 'Condition', subject: { reference: 'Patient/pat-b' } },
              request: { method: 'POST', url: 'Condition' },
            },
          ],
        });
        expect(transaction.status).toBe(403);
        const deletes = await send(auth, 'post', '', {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [{ request: { method: 'DELETE', url: 'Condition/cond-b' } }],
        });
        expect(deletes.status).toBe(404);
        // Everything of pat-b is as it was.
        for (const url of ['/Observation/obs-b', '/Condition/cond-b']) {
          const res = await get(admin, url);
          expect(res.status, url).toBe(200);
          expect(res.body.meta.versionId, url).toBe('1');
        }
      });

      it('may not upload NDJSON', async () => {
        const res = await request(t.app)
          .post(FHIR)
          .set('Authorization', auth)
          .attach('file', Buffer.from('{"resourceType":"Observation","status":"final"}\n'), 'obs.ndjson');
        expect(res.status).toBe(403);
      });
    });

    describe('a RelatedPerson user', () => {
      it("sees the linked patient's compartment, its own profile included, and nothing else", async () => {
        const auth = await token('related', ['user/*.rs']);
        expect(fixtures((await get(auth, '/Observation')).body)).toEqual([
          'Observation/obs-b',
          'Observation/obs-x',
        ]);
        expect(refs((await get(auth, '/Patient')).body)).toEqual(['Patient/pat-b']);
        expect((await get(auth, '/RelatedPerson/rp-1')).status).toBe(200);
        expect((await get(auth, '/Observation/obs-a')).status).toBe(404);
        expect((await get(auth, '/Patient/pat-a/$everything')).status).toBe(404);
      });
    });

    describe('a Practitioner user', () => {
      it("sees the project's data with user/ scopes, and one patient's with patient/ scopes", async () => {
        const wide = await token('doctor', ['user/*.rs']);
        expect(fixtures((await get(wide, '/Observation')).body)).toEqual([
          'Observation/obs-a',
          'Observation/obs-b',
          'Observation/obs-x',
        ]);
        expect((await get(wide, '/Medication/med-1')).status).toBe(200);
        const launched = await token('doctor', ['patient/*.rs'], 'pat-a');
        expect(fixtures((await get(launched, '/Observation')).body)).toEqual(['Observation/obs-a']);
        expect((await get(launched, '/Observation/obs-b')).status).toBe(404);
        // Its own profile, with a user/ scope of its type.
        const own = await token('doctor', ['patient/*.rs', 'user/Practitioner.read'], 'pat-a');
        expect((await get(own, '/Practitioner/pr-1')).status).toBe(200);
      });

      it('patient/ scopes without a launch patient grant nothing; system/ scopes are not a user’s', async () => {
        const noContext = await token('doctor', ['patient/*.rs']);
        expect((await get(noContext, '/Observation')).status).toBe(403);
        const system = await token('patient', ['system/*.*']);
        expect((await get(system, '/Observation')).status).toBe(403);
      });
    });

    describe('NDJSON upload by a Practitioner user', () => {
      const upload = (auth: string, lines: FhirResource[]) =>
        request(t.app)
          .post(FHIR)
          .set('Authorization', auth)
          .attach('file', Buffer.from(lines.map((l) => `${JSON.stringify(l)}\n`).join('')), 'data.ndjson');

      it('loads within its reach only', async () => {
        const line = (id: string, patient: string): FhirResource => ({
          resourceType: 'Observation',
          id,
          status: 'final',
          subject: { reference: `Patient/${patient}` },
        });
        const wide = await token('doctor', ['user/*.cruds']);
        expect((await upload(wide, [line('up-1', 'pat-b')])).status).toBe(200);
        expect((await get(admin, '/Observation/up-1')).status).toBe(200);
        const launched = await token('doctor', ['patient/*.cruds'], 'pat-a');
        const res = await upload(launched, [line('up-2', 'pat-a'), line('up-3', 'pat-b')]);
        expect(res.status).toBe(200);
        const rejected = (res.body.issue as { severity: string; location?: string[] }[]).filter(
          (i) => i.severity === 'error',
        );
        expect(rejected.map((i) => i.location)).toEqual([['data.ndjson:2']]);
        expect((await get(admin, '/Observation/up-2')).status).toBe(200);
        expect((await get(admin, '/Observation/up-3')).status).toBe(404);
      });
    });

    describe('bulk export by users', () => {
      async function exportOf(
        auth: string,
        url: string,
      ): Promise<{ status: number; files: string[]; output: string[] }> {
        const kickoff = await get(auth, url).set('Accept', FHIR_JSON).set('Prefer', 'respond-async');
        if (kickoff.status !== 202) return { status: kickoff.status, files: [], output: [] };
        const status = new URL(kickoff.headers['content-location'] as string).pathname;
        const res = await eventually('the export to end', async () => {
          const answer = await request(t.app).get(status).set('Authorization', auth);
          if (answer.status !== 200) expect(answer.status).toBe(202);
          return answer.status === 200 && answer;
        });
        const files = (res.body.output as { url: string }[]).map((o) => new URL(o.url).pathname);
        const output: string[] = [];
        for (const file of files) {
          const download = await request(t.app).get(file).set('Authorization', auth).buffer(true);
          expect(download.status).toBe(200);
          for (const line of String(download.text).split('\n').filter(Boolean)) {
            const resource = JSON.parse(line) as FhirResource;
            output.push(`${resource.resourceType}/${resource.id}`);
          }
        }
        return { status: 200, files, output: output.sort() };
      }

      it('exports its own compartment at Patient and Group level, never at system level', async () => {
        const auth = await token('patient', ['user/*.rs']);
        expect((await exportOf(auth, '/$export')).status).toBe(403);
        const associated = '/Patient/$export?_type=Patient&includeAssociatedData=LatestProvenanceResources';
        expect((await exportOf(auth, associated)).status).toBe(403);
        expect((await exportOf(auth, '/Group/no-such-group/$export')).status).toBe(404);
        const own = await exportOf(auth, '/Patient/$export?_type=Patient,Observation,Condition');
        expect(own.status).toBe(200);
        expect(own.output.filter((r) => FIXTURES.has(r))).toEqual(['Observation/obs-a', 'Patient/pat-a']);
        const group = await exportOf(auth, '/Group/grp/$export?_type=Patient,Observation');
        expect(group.output.filter((r) => FIXTURES.has(r))).toEqual(['Observation/obs-a', 'Patient/pat-a']);
        const asked = await exportOf(auth, '/Patient/$export?_type=Patient&patient=Patient/pat-b');
        expect(asked.output).toEqual([]);

        // The files are the user's own: another user of the project and a client that may export get
        // a 404 or 403, the same user gets them.
        const file = own.files[0]!;
        const other = await token('doctor', ['user/*.rs']);
        expect((await request(t.app).get(file).set('Authorization', other)).status).toBe(404);
        expect((await request(t.app).get(file).set('Authorization', auth)).status).toBe(200);
      });

      it('a _typeFilter chain or _has never matches through a resource the user cannot see', async () => {
        const patient = await token('patient', ['user/*.rs']);
        const doctor = await token('doctor', ['user/*.rs']);
        const own = async (auth: string, type: string, filter: string) =>
          (
            await exportOf(auth, `/Patient/$export?_type=${type}&_typeFilter=${encodeURIComponent(filter)}`)
          ).output.filter((r) => FIXTURES.has(r));
        // obs-x, pat-b's, is about pat-a (focus); obs-a's member obs-b is pat-b's.
        const has = 'Patient?_has:Observation:focus:status=final';
        expect(await own(doctor, 'Patient', has)).toEqual(['Patient/pat-a']);
        expect(await own(patient, 'Patient', has)).toEqual([]);
        const chain = 'Observation?has-member:Observation.status=final';
        expect(await own(doctor, 'Observation', chain)).toEqual(['Observation/obs-a']);
        expect(await own(patient, 'Observation', chain)).toEqual([]);
        // As the user's own search answers.
        expect(fixtures((await get(patient, '/Patient?_has:Observation:focus:status=final')).body)).toEqual(
          [],
        );
        expect(
          fixtures((await get(patient, '/Observation?has-member:Observation.status=final')).body),
        ).toEqual([]);
      });

      it("a Practitioner's system export is refused; its Patient export holds every patient", async () => {
        const auth = await token('doctor', ['user/*.rs']);
        expect((await exportOf(auth, '/$export')).status).toBe(403);
        const all = await exportOf(auth, '/Patient/$export?_type=Patient');
        expect(all.output).toEqual(['Patient/pat-a', 'Patient/pat-b']);
      });
    });
  }),
);
