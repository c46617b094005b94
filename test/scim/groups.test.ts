// SCIM Groups (RFC 7643 §4.2, RFC 7644) on every store: create, read, replace, delete, the FHIR
// Group each one is, uniqueness, ETags, filters, attributes and paging.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { expectScimError } from '../helpers/protocol-errors.js';
import { GROUP_SCHEMA, groupApp, membersOf, SCIM_TAG, versionsOf } from './group-app.js';

forEachStore('SCIM Groups', (store, open) => {
  describe(`SCIM Groups (${store})`, () => {
    let storage: Storage;
    let t: Awaited<ReturnType<typeof groupApp>>;
    beforeEach(async () => {
      storage = await open();
      t = await groupApp(storage);
    });
    afterEach(() => storage.close());

    it('creates a group that is a FHIR Group of the project with the same id', async () => {
      const ada = await t.user('ada');
      const bob = await t.user('bob', { userType: 'Patient', displayName: 'Bob B.' });
      const res = await t.group('Clinicians', [ada.id, bob.id], { externalId: 'ext-1' });
      expect(res.headers['content-type']).toMatch(/application\/scim\+json/);
      const id = res.body.id as string;
      expect(res.headers.location).toMatch(new RegExp(`/api/scim/v2/Groups/${id}$`));
      expect(res.headers.etag).toBe('W/"1"');
      expect(res.body).toEqual({
        schemas: [GROUP_SCHEMA],
        id,
        externalId: 'ext-1',
        displayName: 'Clinicians',
        members: [
          {
            value: ada.id,
            $ref: expect.stringMatching(`/api/scim/v2/Users/${ada.id}$`),
            display: 'ada Tester',
            type: 'User',
          },
          {
            value: bob.id,
            $ref: expect.stringMatching(`/api/scim/v2/Users/${bob.id}$`),
            display: 'Bob B.',
            type: 'User',
          },
        ],
        meta: {
          resourceType: 'Group',
          created: expect.any(String),
          lastModified: expect.any(String),
          location: res.headers.location,
          version: 'W/"1"',
        },
      });
      expect(res.body.meta.created).toBe(res.body.meta.lastModified);

      const group = await t.fhirGroup(id);
      expect(group).toMatchObject({
        resourceType: 'Group',
        id,
        meta: { versionId: '1', tag: [expect.objectContaining(SCIM_TAG)] },
        type: 'person',
        actual: true,
        name: 'Clinicians',
        quantity: 2,
        identifier: expect.arrayContaining([
          { system: 'urn:fhir-platform-kit:scim-external-id', value: 'ext-1' },
        ]),
      });
      expect(membersOf(group)).toEqual([
        { user: ada.id, entity: ada.profile },
        { user: bob.id, entity: bob.profile },
      ]);
      expect((group.member as { period: { start: string } }[])[0]!.period.start).toEqual(expect.any(String));

      // The same group through FHIR.
      const read = await t.fhir('get', `/Group/${id}`);
      expect(read.status).toBe(200);
      expect(read.body.name).toBe('Clinicians');
      const search = await t.fhir('get', `/Group?member=${ada.profile}`);
      expect(search.body.entry.map((e: { resource: { id: string } }) => e.resource.id)).toEqual([id]);
    });

    it('reads with ETags, replaces with PUT and deletes', async () => {
      const ada = await t.user('ada');
      const bob = await t.user('bob');
      const id = (await t.group('Team', [ada.id])).body.id as string;
      const read = await t.scim('get', `/Groups/${id}`);
      expect(read.status).toBe(200);
      expect(read.headers.etag).toBe('W/"1"');
      const notModified = await t.scim('get', `/Groups/${id}`).set('If-None-Match', 'W/"1"');
      expect(notModified.status).toBe(304);

      const body = { schemas: [GROUP_SCHEMA], id, displayName: 'Team B', members: [{ value: bob.id }] };
      expectScimError(await t.scim('put', `/Groups/${id}`, body).set('If-Match', 'W/"7"'), 412);
      const put = await t.scim('put', `/Groups/${id}`, body).set('If-Match', 'W/"1"');
      expect(put.status).toBe(200);
      expect(put.headers.etag).toBe('W/"2"');
      expect(put.body).toMatchObject({ displayName: 'Team B', members: [{ value: bob.id }] });
      expect(put.body.meta.created).toBe(read.body.meta.created);
      expect(put.body).not.toHaveProperty('externalId');
      const group = await t.fhirGroup(id);
      expect(group.name).toBe('Team B');
      expect(membersOf(group)).toEqual([{ user: bob.id, entity: bob.profile }]);

      // The same content again writes nothing.
      expect((await t.scim('put', `/Groups/${id}`, body)).headers.etag).toBe('W/"2"');
      expect(await versionsOf(storage, 'Group', id)).toBe(2);

      expectScimError(await t.scim('put', `/Groups/${id}`, { ...body, id: 'other' }), 400, 'mutability');
      expectScimError(await t.scim('delete', `/Groups/${id}`).set('If-Match', 'W/"1"'), 412);
      const deleted = await t.scim('delete', `/Groups/${id}`);
      expect(deleted.status).toBe(204);
      // RFC 7644 §3.6: 404 afterwards, not FHIR's 410.
      expectScimError(await t.scim('get', `/Groups/${id}`), 404);
      expectScimError(await t.scim('delete', `/Groups/${id}`), 404);
      expect((await t.fhir('get', `/Group/${id}`)).status).toBe(410);
      // The members' users stay.
      expect((await t.scim('get', `/Users/${bob.id}`)).status).toBe(200);
    });

    it('requires a displayName unique in the project, case-insensitively', async () => {
      expectScimError(await t.scim('post', '/Groups', { schemas: [GROUP_SCHEMA] }), 400, 'invalidValue');
      expectScimError(await t.scim('post', '/Groups', { displayName: '  ' }), 400, 'invalidValue');
      const first = await t.group('Nurses');
      expectScimError(await t.scim('post', '/Groups', { displayName: 'NURSES' }), 409, 'uniqueness');
      const other = await t.group('Doctors');
      const rename = { schemas: [GROUP_SCHEMA], displayName: 'nurses' };
      expectScimError(await t.scim('put', `/Groups/${other.body.id}`, rename), 409, 'uniqueness');
      // A group may change the case of its own name.
      const own = await t.scim('put', `/Groups/${first.body.id}`, rename);
      expect(own.status).toBe(200);
      expect(own.body.displayName).toBe('nurses');
      // Names are per project; a deleted group's name is free again.
      expect((await t.scim('post', '/Groups', { displayName: 'Nurses' }, t.adminB)).status).toBe(201);
      await t.scim('delete', `/Groups/${first.body.id}`).expect(204);
      expect((await t.scim('post', '/Groups', { displayName: 'Nurses' })).status).toBe(201);
    });

    it('refuses members that are no user of the project', async () => {
      const ada = await t.user('ada');
      const outsider = (
        await t.scim(
          'post',
          '/Users',
          { userName: 'x', userType: 'Patient', schemas: ['urn:ietf:params:scim:schemas:core:2.0:User'] },
          t.adminB,
        )
      ).body.id as string;
      for (const value of ['nobody', outsider]) {
        const res = await t.scim('post', '/Groups', {
          displayName: 'G',
          members: [{ value: ada.id }, { value }],
        });
        expectScimError(res, 400, 'invalidValue');
        expect(res.body.detail).toContain(value);
      }
      const group = { displayName: 'G', members: [{ value: ada.id, type: 'Group' }] };
      expectScimError(await t.scim('post', '/Groups', group), 400, 'invalidValue');
      expectScimError(
        await t.scim('post', '/Groups', { displayName: 'G', members: [{ display: 'x' }] }),
        400,
      );
      // Nothing was written.
      expect((await t.scim('get', '/Groups')).body.totalResults).toBe(0);
      // A FHIR Group SCIM does not own is no SCIM Group.
      const plain = await t.fhir('post', '/Group', { resourceType: 'Group', type: 'person', actual: true });
      expect(plain.status).toBe(201);
      expectScimError(await t.scim('get', `/Groups/${plain.body.id}`), 404);
      expect((await t.scim('get', '/Groups')).body.totalResults).toBe(0);
      // Another project's group is invisible.
      const mine = (await t.group('Mine')).body.id as string;
      expectScimError(await t.scim('get', `/Groups/${mine}`, undefined, t.adminB), 404);
    });

    it('filters on displayName, externalId, members.value and id', async () => {
      const ada = await t.user('ada');
      const bob = await t.user('bob');
      const a = (await t.group('Alpha', [ada.id], { externalId: 'e-a' })).body.id as string;
      const b = (await t.group('Beta', [ada.id, bob.id], { externalId: 'e-b' })).body.id as string;
      const c = (await t.group('Gamma')).body.id as string;
      const ids = async (filter: string) => {
        const res = await t.scim('get', `/Groups?filter=${encodeURIComponent(filter)}`);
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        expect(res.body.totalResults).toBe(res.body.Resources.length);
        return (res.body.Resources as { id: string }[]).map((r) => r.id).sort();
      };
      expect(await ids('displayName eq "alpha"')).toEqual([a]);
      expect(await ids('displayName eq "Alph"')).toEqual([]);
      expect(await ids('externalId eq "e-b"')).toEqual([b]);
      expect(await ids('externalId eq "E-B"')).toEqual([]);
      expect(await ids(`members.value eq "${bob.id}"`)).toEqual([b]);
      expect(await ids(`members[value eq "${ada.id}"]`)).toEqual([a, b].sort());
      expect(await ids('members.value eq "nobody"')).toEqual([]);
      expect(await ids(`id eq "${c}"`)).toEqual([c]);
      expect(await ids('displayName sw "a" or displayName eq "Gamma"')).toEqual([a, c].sort());
      expect(await ids(`displayName eq "Beta" and members.value eq "${ada.id}"`)).toEqual([b]);
      expect(await ids('not (members pr)')).toEqual([c]);
      expect(await ids('meta.lastModified gt "2000-01-01T00:00:00Z"')).toEqual([a, b, c].sort());
      expectScimError(
        await t.scim('get', `/Groups?filter=${encodeURIComponent('displayNmae eq "x"')}`),
        400,
        'invalidFilter',
      );
      expectScimError(
        await t.scim('get', `/Groups?filter=${encodeURIComponent('userName eq "x"')}`),
        400,
        'invalidFilter',
      );
      // POST .search takes the same.
      const searched = await t.scim('post', '/Groups/.search', {
        schemas: ['urn:ietf:params:scim:api:messages:2.0:SearchRequest'],
        filter: 'displayName eq "Beta"',
        excludedAttributes: ['members'],
      });
      expect(searched.body.Resources).toEqual([expect.not.objectContaining({ members: expect.anything() })]);
      expect(searched.body.Resources[0].id).toBe(b);
    });

    it('selects attributes and pages', async () => {
      const ada = await t.user('ada');
      const created: string[] = [];
      for (const name of ['G1', 'G2', 'G3', 'G4', 'G5'])
        created.push((await t.group(name, [ada.id])).body.id as string);
      // Entra lists groups without their members.
      const lean = await t.scim(
        'get',
        '/Groups?excludedAttributes=members&filter=displayName%20eq%20%22G2%22',
      );
      expect(lean.body.Resources).toEqual([
        {
          schemas: [GROUP_SCHEMA],
          id: created[1],
          displayName: 'G2',
          meta: expect.objectContaining({ resourceType: 'Group' }),
        },
      ]);
      const names = await t.scim('get', `/Groups/${created[0]}?attributes=displayName`);
      expect(names.body).toEqual({ schemas: [GROUP_SCHEMA], id: created[0], displayName: 'G1' });
      const values = await t.scim('get', `/Groups/${created[0]}?attributes=members.value`);
      expect(values.body.members).toEqual([{ value: ada.id }]);

      const page = async (startIndex: number, count: number) => {
        const res = await t.scim('get', `/Groups?startIndex=${startIndex}&count=${count}&attributes=id`);
        expect(res.body).toMatchObject({
          totalResults: 5,
          startIndex,
          itemsPerPage: res.body.Resources.length,
        });
        return (res.body.Resources as { id: string }[]).map((r) => r.id);
      };
      const walked = [...(await page(1, 2)), ...(await page(3, 2)), ...(await page(5, 2))];
      expect(walked).toEqual([...created].sort());
      expect(await page(6, 2)).toEqual([]);
      expect(await page(1, 0)).toEqual([]);

      const sorted = await t.scim('get', '/Groups?sortBy=displayName&sortOrder=descending&count=2');
      expect(sorted.status, JSON.stringify(sorted.body)).toBe(200);
      expect(sorted.body.Resources.map((r: { displayName: string }) => r.displayName)).toEqual(['G5', 'G4']);
      expect(sorted.body.totalResults).toBe(5);
    });
  });
});
