import { describe, expect, it } from 'vitest';
import type { GrantRecord, Storage } from '../storage/types.js';

function grant(fields: Partial<GrantRecord> & Pick<GrantRecord, 'kind' | 'key'>): GrantRecord {
  return {
    projectId: 'gp1',
    clientId: 'app1',
    expiresAt: Date.now() + 60_000,
    data: { n: 1 },
    ...fields,
  };
}

/**
 * The `grants` of the storage contract (SMART App Launch grants): single-use `take`, `use` marking
 * a record used exactly once (concurrent calls included), `extend` never shortening a record nor
 * reviving one, expiry, revocation by user, client and family that never removes revoked token
 * ids, and `extend` or `use` racing `revoke`: once the revocation resolved, nothing it removed is
 * handed out or extended, whichever came first. Skipped for a store without `grants`.
 * Called inside `runStorageContract`.
 */
export function grantsStorageContract(getStorage: () => Storage): void {
  describe('grants', () => {
    const grants = () => {
      const store = getStorage().grants;
      if (!store) throw new Error('no grants');
      return store;
    };

    it('puts, gets and replaces a grant; another kind or key is another record', async () => {
      if (!getStorage().grants) return;
      await grants().put(grant({ kind: 'ticket', key: 't1', userId: 'u1' }));
      expect(await grants().get('ticket', 't1')).toMatchObject({
        kind: 'ticket',
        key: 't1',
        projectId: 'gp1',
        clientId: 'app1',
        userId: 'u1',
        data: { n: 1 },
      });
      expect(await grants().get('code', 't1')).toBeUndefined();
      await grants().put(grant({ kind: 'ticket', key: 't1', data: { n: 2 } }));
      const replaced = await grants().get('ticket', 't1');
      expect(replaced?.data).toEqual({ n: 2 });
      expect(replaced?.userId).toBeUndefined();
      // What the caller gets is its own copy.
      replaced!.data.n = 3;
      expect((await grants().get('ticket', 't1'))?.data).toEqual({ n: 2 });
    });

    it('hands an expired grant to nobody', async () => {
      if (!getStorage().grants) return;
      await grants().put(grant({ kind: 'code', key: 'old', expiresAt: Date.now() - 1 }));
      expect(await grants().get('code', 'old')).toBeUndefined();
      expect(await grants().take('code', 'old')).toBeUndefined();
      expect(await grants().use('code', 'old')).toBeUndefined();
    });

    it('take is single-use, even for calls racing', async () => {
      if (!getStorage().grants) return;
      await grants().put(grant({ kind: 'code', key: 'c1' }));
      const results = await Promise.all([1, 2, 3, 4].map(() => grants().take('code', 'c1')));
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await grants().get('code', 'c1')).toBeUndefined();
      expect(await grants().take('code', 'c1')).toBeUndefined();
    });

    it('use marks a grant used once and keeps it, even for calls racing', async () => {
      if (!getStorage().grants) return;
      await grants().put(grant({ kind: 'refresh', key: 'r1', family: 'f1' }));
      const results = await Promise.all([1, 2, 3, 4].map(() => grants().use('refresh', 'r1')));
      expect(results.filter((r) => r?.firstUse)).toHaveLength(1);
      for (const r of results) expect(r?.grant).toMatchObject({ key: 'r1', family: 'f1', used: true });
      expect(await grants().get('refresh', 'r1')).toMatchObject({ used: true });
      expect((await grants().use('refresh', 'r1'))?.firstUse).toBe(false);
    });

    it('extends an unexpired grant, never shortening it; not one never put, expired or revoked', async () => {
      if (!getStorage().grants) return;
      const now = Date.now();
      await grants().put(grant({ kind: 'family', key: 'f1', family: 'f1', expiresAt: now + 60_000 }));
      expect(await grants().extend('family', 'f1', now + 120_000)).toBe(true);
      expect((await grants().get('family', 'f1'))?.expiresAt).toBe(now + 120_000);
      expect(await grants().extend('family', 'f1', now + 90_000)).toBe(true);
      expect((await grants().get('family', 'f1'))?.expiresAt).toBe(now + 120_000);
      expect(await grants().extend('family', 'nobody', now + 90_000)).toBe(false);
      expect(await grants().get('family', 'nobody')).toBeUndefined();
      await grants().put(grant({ kind: 'family', key: 'old', family: 'old', expiresAt: now - 1 }));
      expect(await grants().extend('family', 'old', now + 90_000)).toBe(false);
      expect(await grants().get('family', 'old')).toBeUndefined();
      expect(await grants().revoke({ projectId: 'gp1', family: 'f1' })).toBe(1);
      expect(await grants().extend('family', 'f1', now + 180_000)).toBe(false);
      expect(await grants().get('family', 'f1')).toBeUndefined();
    });

    it('a family revoked while its tokens are issued and its refresh token spent stays revoked', async () => {
      if (!getStorage().grants) return;
      // What the token endpoint does for two requests racing on one refresh token: one issues
      // (stores its new refresh token, extends the family, spends the old one) while the other,
      // having seen the token spent, revokes the family. Every order ends with the family gone.
      for (let round = 0; round < 8; round++) {
        const family = `race${round}`;
        const later = Date.now() + 120_000;
        await grants().put(grant({ kind: 'family', key: family, family }));
        await grants().put(grant({ kind: 'refresh', key: `${family}-old`, family }));
        const issue = async () => {
          await grants().put(grant({ kind: 'refresh', key: `${family}-new`, family }));
          if (await grants().extend('family', family, later)) await grants().use('refresh', `${family}-old`);
        };
        const revoke = () => grants().revoke({ projectId: 'gp1', family });
        await Promise.all(round % 2 === 0 ? [issue(), revoke()] : [revoke(), issue()]);
        expect(await grants().get('family', family)).toBeUndefined();
        expect(await grants().extend('family', family, later + 1)).toBe(false);
        expect(await grants().get('refresh', `${family}-old`)).toBeUndefined();
        expect(await grants().use('refresh', `${family}-old`)).toBeUndefined();
      }
    });

    it('revokes families with the rest of a user’s or client’s grants', async () => {
      if (!getStorage().grants) return;
      await grants().put(grant({ kind: 'family', key: 'fu', family: 'fu', userId: 'u1' }));
      await grants().put(grant({ kind: 'family', key: 'fc', family: 'fc', userId: 'u2', clientId: 'app2' }));
      expect(await grants().revoke({ projectId: 'gp1', userId: 'u1' })).toBe(1);
      expect(await grants().get('family', 'fu')).toBeUndefined();
      expect(await grants().revoke({ projectId: 'gp1', clientId: 'app2' })).toBe(1);
      expect(await grants().get('family', 'fc')).toBeUndefined();
    });

    it('revokes by family, by user and by client, within the project only, never revoked token ids', async () => {
      if (!getStorage().grants) return;
      await grants().put(grant({ kind: 'refresh', key: 'a1', family: 'fa', userId: 'u1' }));
      await grants().put(grant({ kind: 'refresh', key: 'a2', family: 'fa', userId: 'u1' }));
      await grants().put(grant({ kind: 'refresh', key: 'b1', family: 'fb', userId: 'u1' }));
      await grants().put(grant({ kind: 'code', key: 'c1', userId: 'u1' }));
      await grants().put(grant({ kind: 'refresh', key: 'd1', family: 'fd', userId: 'u2', clientId: 'app2' }));
      await grants().put(grant({ kind: 'refresh', key: 'e1', family: 'fe', userId: 'u1', projectId: 'gp2' }));
      await grants().put(grant({ kind: 'revoked-token', key: 'jti1', userId: 'u1' }));

      expect(await grants().revoke({ projectId: 'gp1', family: 'fa' })).toBe(2);
      expect(await grants().get('refresh', 'a1')).toBeUndefined();
      expect(await grants().get('refresh', 'b1')).toBeDefined();

      expect(await grants().revoke({ projectId: 'gp1', userId: 'u1' })).toBe(2);
      expect(await grants().get('refresh', 'b1')).toBeUndefined();
      expect(await grants().get('code', 'c1')).toBeUndefined();
      expect(await grants().get('refresh', 'e1')).toBeDefined();
      expect(await grants().get('revoked-token', 'jti1')).toBeDefined();

      expect(await grants().revoke({ projectId: 'gp1', clientId: 'app2' })).toBe(1);
      expect(await grants().get('refresh', 'd1')).toBeUndefined();
      expect(await grants().revoke({ projectId: 'gp1', userId: 'nobody' })).toBe(0);
    });
  });
}
