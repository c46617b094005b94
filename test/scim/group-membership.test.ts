// Group membership follows the users, on every store: a user deleted through SCIM leaves every
// group in the same transaction; a user deactivated stays a member marked `member.inactive`, and
// is unmarked when reactivated. Groups FHIR owns are left alone.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { groupApp, membersOf, patchOp, versionsOf, type GroupApp } from './group-app.js';

forEachStore('SCIM Group membership', (store, open) => {
  describe(`SCIM Group membership follows the users (${store})`, () => {
    let storage: Storage;
    let t: GroupApp;
    beforeEach(async () => {
      storage = await open();
      t = await groupApp(storage);
    });
    afterEach(() => storage.close());

    const deactivate = (id: string, active: boolean) =>
      t.scim(
        'patch',
        `/Users/${id}`,
        patchOp({ op: 'Replace', path: 'active', value: active ? 'True' : 'False' }),
      );

    it('removes a deleted user from every group, and only from groups it was in', async () => {
      const [a, b] = [await t.user('a'), await t.user('b')];
      const one = (await t.group('One', [a.id, b.id])).body.id as string;
      const two = (await t.group('Two', [b.id, a.id])).body.id as string;
      const three = (await t.group('Three', [b.id])).body.id as string;
      // A Group FHIR owns with the same profile as a member stays as it is.
      const plain = await t.fhir('post', '/Group', {
        resourceType: 'Group',
        type: 'person',
        actual: true,
        member: [{ entity: { reference: a.profile } }],
      });

      await t.scim('delete', `/Users/${a.id}`).expect(204);
      for (const [id, left] of [
        [one, [b.id]],
        [two, [b.id]],
        [three, [b.id]],
      ] as const) {
        const group = await t.fhirGroup(id);
        expect(membersOf(group).map((m) => m.user)).toEqual(left);
        expect(group.quantity).toBe(left.length);
      }
      // The group without the user was not written.
      expect(await versionsOf(storage, 'Group', three)).toBe(1);
      expect(await versionsOf(storage, 'Group', one)).toBe(2);
      expect((await t.fhir('get', `/Group/${plain.body.id}`)).body.member).toEqual([
        { entity: { reference: a.profile } },
      ]);
      const listed = await t.scim('get', `/Groups/${one}`);
      expect(listed.body.members.map((m: { value: string }) => m.value)).toEqual([b.id]);
      expect(listed.body.meta.created).not.toBe(listed.body.meta.lastModified);
    });

    it('marks a deactivated member inactive and unmarks it when reactivated', async () => {
      const [a, b] = [await t.user('a'), await t.user('b')];
      const id = (await t.group('Team', [a.id, b.id])).body.id as string;

      await deactivate(a.id, false).expect(200);
      let group = await t.fhirGroup(id);
      expect(membersOf(group)).toEqual([
        { user: a.id, entity: a.profile, inactive: true },
        { user: b.id, entity: b.profile },
      ]);
      // Still a SCIM member.
      expect((await t.scim('get', `/Groups/${id}`)).body.members).toHaveLength(2);
      // A change that leaves `active` as it is writes no group.
      await t
        .scim('patch', `/Users/${a.id}`, patchOp({ op: 'replace', path: 'displayName', value: 'A' }))
        .expect(200);
      expect(await versionsOf(storage, 'Group', id)).toBe(2);

      // Reactivated with a PUT, as Okta does.
      const user = (await t.scim('get', `/Users/${a.id}`)).body as Record<string, unknown>;
      await t.scim('put', `/Users/${a.id}`, { ...user, active: true }).expect(200);
      group = await t.fhirGroup(id);
      expect(membersOf(group)).toEqual([
        { user: a.id, entity: a.profile },
        { user: b.id, entity: b.profile },
      ]);
      expect(group.member as unknown[]).toEqual([
        expect.not.objectContaining({ inactive: expect.anything() }),
        expect.anything(),
      ]);
      expect(await versionsOf(storage, 'Group', id)).toBe(3);
    });

    it('adds an inactive user as an inactive member, and a deleted member leaves deactivated', async () => {
      const a = await t.user('a', { active: false });
      const id = (await t.group('Later', [a.id])).body.id as string;
      expect(membersOf(await t.fhirGroup(id))).toEqual([{ user: a.id, entity: a.profile, inactive: true }]);
      await t.scim('delete', `/Users/${a.id}`).expect(204);
      expect(membersOf(await t.fhirGroup(id))).toEqual([]);
      expect((await t.scim('get', `/Groups/${id}`)).body).not.toHaveProperty('members');
    });
  });
});
