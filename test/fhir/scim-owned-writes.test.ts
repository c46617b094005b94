// FHIR clients read, search and export the Groups SCIM owns, and cannot change them: every FHIR
// write entry point (update, PATCH, delete, conditional update and delete, create, update-as-create,
// batch and transaction entries, NDJSON upload) answers 409 naming SCIM, and nothing is written.
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { bulkTestApp, downloadAll, exportManifest, keysOf } from '../helpers/bulk-export.js';
import { forEachStore } from '../helpers/each-store.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';
import { FHIR_BASE, groupApp, SCIM_TAG, versionsOf, type GroupApp } from '../scim/group-app.js';

/** A 409 naming SCIM as the owner. */
function expectOwnedByScim(res: request.Response): void {
  expectOperationOutcome(res, 409, 'conflict');
  expect(res.body.issue[0].diagnostics ?? res.body.issue[0].details?.text).toMatch(/SCIM/);
}

forEachStore('FHIR writes to SCIM Groups', (store, open) => {
  describe(`FHIR writes to a SCIM Group are refused (${store})`, () => {
    let storage: Storage;
    let t: GroupApp;
    let id: string;
    let patient: { id: string; profile: string };
    beforeEach(async () => {
      storage = await open();
      t = await groupApp(storage);
      patient = await t.user('pat', { userType: 'Patient' });
      id = (await t.group('Cohort', [patient.id])).body.id as string;
    });
    afterEach(() => storage.close());

    const unchanged = async () => {
      expect(await versionsOf(storage, 'Group', id)).toBe(1);
      expect((await t.scim('get', `/Groups/${id}`)).body.displayName).toBe('Cohort');
    };

    it('lets FHIR clients read and search it', async () => {
      const read = await t.fhir('get', `/Group/${id}`);
      expect(read.status).toBe(200);
      expect(read.body.meta.tag).toEqual([expect.objectContaining(SCIM_TAG)]);
      const byTag = await t.fhir('get', `/Group?_tag=${SCIM_TAG.system}|${SCIM_TAG.code}`);
      expect(byTag.body.entry.map((e: { resource: { id: string } }) => e.resource.id)).toEqual([id]);
      const byMember = await t.fhir('get', `/Group?member=${patient.profile}&type=person&actual=true`);
      expect(byMember.body.entry).toHaveLength(1);
      expect((await t.fhir('get', `/Group/${id}/_history/1`)).status).toBe(200);
    });

    it('refuses update, PATCH and delete, plain and conditional', async () => {
      const current = (await t.fhir('get', `/Group/${id}`)).body as Record<string, unknown>;
      expectOwnedByScim(await t.fhir('put', `/Group/${id}`, { ...current, name: 'Renamed' }));
      // Taking the tag away does not help.
      expectOwnedByScim(await t.fhir('put', `/Group/${id}`, { ...current, meta: {}, name: 'Renamed' }));
      const jsonPatch = await t
        .fhir('patch', `/Group/${id}`)
        .set('Content-Type', 'application/json-patch+json')
        .send(JSON.stringify([{ op: 'replace', path: '/name', value: 'Renamed' }]));
      expectOwnedByScim(jsonPatch);
      expectOwnedByScim(await t.fhir('delete', `/Group/${id}`));
      const byName = `identifier=${encodeURIComponent('urn:fhir-platform-kit:scim-group-name|cohort')}`;
      expectOwnedByScim(
        await t.fhir('put', `/Group?${byName}`, { resourceType: 'Group', type: 'person', actual: false }),
      );
      expectOwnedByScim(await t.fhir('delete', `/Group?${byName}`));
      await unchanged();
    });

    it('refuses creating a resource with the SCIM tag, by POST or by PUT', async () => {
      const tagged = { resourceType: 'Group', type: 'person', actual: true, meta: { tag: [SCIM_TAG] } };
      expectOwnedByScim(await t.fhir('post', '/Group', tagged));
      expectOwnedByScim(await t.fhir('put', '/Group/forged', { ...tagged, id: 'forged' }));
      expectOwnedByScim(
        await t.fhir('post', '/Patient', { resourceType: 'Patient', meta: { tag: [SCIM_TAG] } }),
      );
      expect((await t.fhir('get', '/Group/forged')).status).toBe(404);
      expect((await t.scim('get', '/Groups')).body.totalResults).toBe(1);
      // Groups FHIR owns are written as ever.
      const plain = await t.fhir('post', '/Group', { resourceType: 'Group', type: 'person', actual: true });
      expect(plain.status).toBe(201);
      const plainId = plain.body.id as string;
      expect((await t.fhir('put', `/Group/${plainId}`, { ...plain.body, name: 'Mine' })).status).toBe(200);
      expect((await t.fhir('delete', `/Group/${plainId}`)).status).toBe(204);
    });

    it('refuses batch entries one by one and transactions as a whole', async () => {
      const current = (await t.fhir('get', `/Group/${id}`)).body as Record<string, unknown>;
      const patientEntry = {
        request: { method: 'POST', url: 'Patient' },
        resource: { resourceType: 'Patient', name: [{ family: 'Kept' }] },
      };
      const batch = await t.fhir('post', '', {
        resourceType: 'Bundle',
        type: 'batch',
        entry: [
          { request: { method: 'PUT', url: `Group/${id}` }, resource: { ...current, name: 'X' } },
          { request: { method: 'DELETE', url: `Group/${id}` } },
          {
            request: { method: 'POST', url: 'Group' },
            resource: { resourceType: 'Group', type: 'person', actual: true, meta: { tag: [SCIM_TAG] } },
          },
          patientEntry,
        ],
      });
      expect(batch.status).toBe(200);
      const statuses = batch.body.entry.map((e: { response: { status: string } }) => e.response.status);
      expect(statuses.slice(0, 3).map((s: string) => s.slice(0, 3))).toEqual(['409', '409', '409']);
      expect(statuses[3]).toMatch(/^201/);
      expect(
        batch.body.entry[0].response.outcome.issue[0].diagnostics ??
          batch.body.entry[0].response.outcome.issue[0].details.text,
      ).toMatch(/SCIM/);

      for (const entry of [
        { request: { method: 'DELETE', url: `Group/${id}` } },
        { request: { method: 'PUT', url: `Group/${id}` }, resource: { ...current, name: 'X' } },
        {
          request: { method: 'PATCH', url: `Group/${id}` },
          resource: {
            resourceType: 'Parameters',
            parameter: [
              {
                name: 'operation',
                part: [
                  { name: 'type', valueCode: 'replace' },
                  { name: 'path', valueString: 'Group.name' },
                  { name: 'value', valueString: 'X' },
                ],
              },
            ],
          },
        },
      ]) {
        const transaction = await t.fhir('post', '', {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            { ...patientEntry, resource: { resourceType: 'Patient', name: [{ family: 'Lost' }] } },
            entry,
          ],
        });
        expectOwnedByScim(transaction);
      }
      expect((await t.fhir('get', '/Patient?family=Lost&_total=accurate')).body.total).toBe(0);
      expect((await t.fhir('get', '/Patient?family=Kept&_total=accurate')).body.total).toBe(1);
      await unchanged();
    });

    it('rejects NDJSON lines that would change or create one, and loads the others', async () => {
      const current = (await t.fhir('get', `/Group/${id}`)).body as Record<string, unknown>;
      const lines = [
        JSON.stringify({ ...current, name: 'X' }),
        JSON.stringify({ resourceType: 'Patient', id: 'loaded' }),
        JSON.stringify({
          resourceType: 'Group',
          id: 'g-new',
          type: 'person',
          actual: true,
          meta: { tag: [SCIM_TAG] },
        }),
      ];
      const res = await request(t.app)
        .post(FHIR_BASE)
        .set('Authorization', t.admin)
        .attach('file', Buffer.from(`${lines.join('\n')}\n`), {
          filename: 'g.ndjson',
          contentType: 'application/fhir+ndjson',
        });
      expect(res.status).toBe(200);
      const errors = res.body.issue.filter((i: { severity: string }) => i.severity === 'error');
      expect(errors.map((i: { location: string[]; code: string }) => [i.location[0], i.code])).toEqual([
        ['g.ndjson:1', 'conflict'],
        ['g.ndjson:3', 'conflict'],
      ]);
      expect((await t.fhir('get', '/Patient/loaded')).status).toBe(200);
      expect((await t.fhir('get', '/Group/g-new')).status).toBe(404);
      await unchanged();
    });

    it('exports the compartments of its active members with Group/$export', async () => {
      const other = await t.user('other', { userType: 'Patient' });
      const practitioner = await t.user('doc');
      const inactive = await t.user('gone', { userType: 'Patient', active: false });
      for (const subject of [patient.profile, other.profile, inactive.profile])
        await t
          .fhir('post', '/Observation', {
            resourceType: 'Observation',
            status: 'final',
            code: { text: 'x' },
            subject: { reference: subject },
          })
          .expect(201);
      await t
        .scim('put', `/Groups/${id}`, {
          displayName: 'Cohort',
          members: [{ value: patient.id }, { value: practitioner.id }, { value: inactive.id }],
        })
        .expect(200);
      const { app, auth } = await bulkTestApp({ storage, seed: false });
      const manifest = await exportManifest(app, auth, `/Group/${id}/$export?_type=Patient,Observation`);
      const byType = await downloadAll(app, auth, manifest);
      const observations = byType.get('Observation') ?? [];
      expect(keysOf(new Map([['Patient', byType.get('Patient') ?? []]]))).toEqual([patient.profile]);
      expect(observations.map((o) => (o.subject as { reference: string }).reference)).toEqual([
        patient.profile,
      ]);
    });
  });
});
