// SCIM Group PATCH and PUT as identity providers send them (Microsoft Entra ID: capitalised ops,
// `members` with a value list, `members[value eq "…"]` removals; Okta: path-less replace, replace of
// the whole member list, PUT with members), on every store, and a group of 10,000 members that a
// one-member PATCH writes once.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import { expectScimError } from '../helpers/protocol-errors.js';
import {
  countingWrites,
  GROUP_SCHEMA,
  groupApp,
  membersOf,
  patchOp,
  versionsOf,
  type GroupApp,
} from './group-app.js';

/** `n` users of `proj-a` written straight to the store (their profiles in one batch): their ids. */
async function manyUsers(storage: Storage, n: number): Promise<string[]> {
  const profiles = Array.from({ length: n }, (_, i) => `bulk-${i}`);
  await storage.writeResources(
    'proj-a',
    profiles.map((id) => ({ op: 'update', resource: { resourceType: 'Practitioner', id } })),
  );
  return storage.transaction(async (tx) => {
    const ids: string[] = [];
    for (const profileId of profiles) {
      const user = await tx.createUser('proj-a', {
        projectId: 'proj-a',
        userName: `${profileId}@example.org`,
        userType: 'Practitioner',
        profileId,
        active: true,
        data: {},
      });
      ids.push(user.id);
    }
    return ids;
  });
}

forEachStore('SCIM Group PATCH', (store, open) => {
  describe(`SCIM Group PATCH and PUT (${store})`, () => {
    let storage: Storage;
    let t: GroupApp;
    beforeEach(async () => {
      storage = await open();
      t = await groupApp(storage);
    });
    afterEach(() => storage.close());

    const members = async (id: string) => membersOf(await t.fhirGroup(id)).map((m) => m.user);

    it('applies the operations Microsoft Entra ID sends', async () => {
      const [a, b, c] = [await t.user('a'), await t.user('b'), await t.user('c')];
      const id = (await t.group('Entra group')).body.id as string;
      const patch = (...ops: Record<string, unknown>[]) => t.scim('patch', `/Groups/${id}`, patchOp(...ops));

      const added = await patch({ op: 'Add', path: 'members', value: [{ value: a.id }, { value: b.id }] });
      expect(added.status, JSON.stringify(added.body)).toBe(200);
      expect(added.body.members.map((m: { value: string }) => m.value)).toEqual([a.id, b.id]);
      expect(await members(id)).toEqual([a.id, b.id]);

      // Adding a member again and removing an absent one are no errors, and write nothing.
      const again = await patch(
        { op: 'Add', path: 'members', value: [{ value: a.id }] },
        { op: 'Remove', path: 'members', value: [{ value: c.id }] },
      );
      expect(again.status).toBe(200);
      expect(again.headers.etag).toBe(added.headers.etag);
      expect(await members(id)).toEqual([a.id, b.id]);

      await patch({ op: 'Remove', path: 'members', value: [{ value: a.id }] }).expect(200);
      expect(await members(id)).toEqual([b.id]);
      await patch({ op: 'Add', path: 'members', value: [{ value: c.id }] }).expect(200);
      await patch({ op: 'Remove', path: `members[value eq "${b.id}"]` }).expect(200);
      await patch({ op: 'Remove', path: `members[value eq "${b.id}"]` }).expect(200);
      expect(await members(id)).toEqual([c.id]);

      const renamed = await patch({ op: 'Replace', path: 'displayName', value: 'Entra group 2' });
      expect(renamed.body.displayName).toBe('Entra group 2');
      expect((await t.fhirGroup(id)).name).toBe('Entra group 2');
      await patch({ op: 'Replace', path: 'externalId', value: 'ext-9' }).expect(200);
      const found = await t.scim('get', `/Groups?filter=${encodeURIComponent('externalId eq "ext-9"')}`);
      expect(found.body.Resources.map((r: { id: string }) => r.id)).toEqual([id]);

      // Errors change nothing: an unknown user, a removed displayName, an immutable sub-attribute.
      const before = await versionsOf(storage, 'Group', id);
      expectScimError(
        await patch({ op: 'Add', path: 'members', value: [{ value: 'ghost' }] }),
        400,
        'invalidValue',
      );
      expectScimError(await patch({ op: 'Remove', path: 'displayName' }), 400, 'invalidValue');
      expectScimError(
        await patch({ op: 'Replace', path: `members[value eq "${c.id}"].value`, value: a.id }),
        400,
        'mutability',
      );
      expectScimError(await patch({ op: 'Add', path: 'owners', value: 'x' }), 400, 'invalidPath');
      expect(await versionsOf(storage, 'Group', id)).toBe(before);
      expect(await members(id)).toEqual([c.id]);
    });

    it('applies the operations and PUTs Okta sends', async () => {
      const [a, b, c] = [await t.user('a'), await t.user('b'), await t.user('c')];
      const id = (await t.group('Okta group', [a.id])).body.id as string;
      const patch = (...ops: Record<string, unknown>[]) => t.scim('patch', `/Groups/${id}`, patchOp(...ops));

      // Group push: rename by a path-less replace carrying the id.
      const renamed = await patch({ op: 'replace', value: { id, displayName: 'Okta group 2' } });
      expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
      expect(renamed.body.displayName).toBe('Okta group 2');
      // Replace of the whole member list, with a path and without.
      await patch({
        op: 'replace',
        path: 'members',
        value: [{ value: b.id, display: 'B' }, { value: c.id }],
      }).expect(200);
      expect(await members(id)).toEqual([b.id, c.id]);
      expect(((await t.fhirGroup(id)).member as { entity: { display?: string } }[])[0]!.entity.display).toBe(
        'B',
      );
      await patch({ op: 'replace', value: { members: [{ value: a.id }] } }).expect(200);
      expect(await members(id)).toEqual([a.id]);
      await patch({ op: 'add', path: 'members', value: [{ value: c.id, display: 'c@example.org' }] }).expect(
        200,
      );
      await patch({ op: 'remove', path: `members[value eq "${a.id}"]` }).expect(200);
      expect(await members(id)).toEqual([c.id]);
      await patch({ op: 'replace', path: 'members', value: [] }).expect(200);
      expect(await t.fhirGroup(id)).not.toHaveProperty('member');
      expect((await t.fhirGroup(id)).quantity).toBe(0);

      // PUT with members: the list replaces the group's.
      const put = await t.scim('put', `/Groups/${id}`, {
        schemas: [GROUP_SCHEMA],
        id,
        displayName: 'Okta group 2',
        members: [{ value: b.id, display: 'b' }, { value: a.id }],
      });
      expect(put.status).toBe(200);
      expect(await members(id)).toEqual([b.id, a.id]);
      // A remove of every member.
      await patch({ op: 'remove', path: 'members' }).expect(200);
      expect(await members(id)).toEqual([]);
    });

    it('keeps a member entry (and when it joined) while the member stays', async () => {
      const [a, b] = [await t.user('a'), await t.user('b')];
      const id = (await t.group('Stable', [a.id])).body.id as string;
      const joined = ((await t.fhirGroup(id)).member as { period: { start: string } }[])[0]!.period.start;
      await t
        .scim('patch', `/Groups/${id}`, patchOp({ op: 'add', path: 'members', value: [{ value: b.id }] }))
        .expect(200);
      await t
        .scim('put', `/Groups/${id}`, { displayName: 'Stable', members: [{ value: b.id }, { value: a.id }] })
        .expect(200);
      const entries = (await t.fhirGroup(id)).member as {
        entity: { reference: string };
        period: { start: string };
      }[];
      expect(entries.map((e) => e.entity.reference)).toEqual([b.profile, a.profile]);
      expect(entries[1]!.period.start).toBe(joined);
    });

    it('writes a group of 10,000 members once for a PATCH of one member', async () => {
      const counted = countingWrites(await open());
      const big = await groupApp(counted.storage);
      try {
        const ids = await manyUsers(counted.storage, 10_001);
        const [extra, ...members10k] = [ids[0]!, ...ids.slice(1)];
        const created = await big.scim('post', '/Groups', {
          schemas: [GROUP_SCHEMA],
          displayName: 'Everyone',
          members: members10k.map((value) => ({ value })),
        });
        expect(created.status, JSON.stringify(created.body).slice(0, 500)).toBe(201);
        const id = created.body.id as string;
        expect((await big.fhirGroup(id)).quantity).toBe(10_000);

        const writes = counted.writes();
        const added = await big
          .scim(
            'patch',
            `/Groups/${id}?excludedAttributes=members`,
            patchOp({ op: 'Add', path: 'members', value: [{ value: extra }] }),
          )
          .expect(200);
        expect(added.body).not.toHaveProperty('members');
        expect(counted.writes() - writes).toBe(1);
        expect(await versionsOf(counted.storage, 'Group', id)).toBe(2);
        const group = await big.fhirGroup(id);
        expect(group.quantity).toBe(10_001);
        expect(membersOf(group).at(-1)!.user).toBe(extra);

        const removed = counted.writes();
        await big
          .scim(
            'patch',
            `/Groups/${id}?attributes=id`,
            patchOp({ op: 'Remove', path: `members[value eq "${members10k[5000]!}"]` }),
          )
          .expect(200);
        expect(counted.writes() - removed).toBe(1);
        expect(await versionsOf(counted.storage, 'Group', id)).toBe(3);
        expect((await big.fhirGroup(id)).quantity).toBe(10_000);
        // The member filter finds it among them.
        const found = await big.scim(
          'get',
          `/Groups?filter=${encodeURIComponent(`members.value eq "${extra}"`)}&attributes=displayName`,
        );
        expect(found.body.Resources).toEqual([{ schemas: [GROUP_SCHEMA], id, displayName: 'Everyone' }]);
      } finally {
        await counted.storage.close();
      }
    });
  });
});
