import { describe, expect, it } from 'vitest';
import { fileStorage } from '../../src/stores.js';
import { tempDir } from '../helpers/temp-dir.js';
import { clockPast } from '../helpers/eventually.js';

const base = { projectId: 'p1', clientId: 'app1', data: {} };

describe('file store grants', () => {
  it('keeps refresh tokens and revoked token ids across a restart, not tickets or codes', async () => {
    const dir = tempDir('grants-');
    const first = await fileStorage({ dir });
    const expiresAt = Date.now() + 60_000;
    await first.grants.put({ ...base, kind: 'refresh', key: 'r1', family: 'f1', userId: 'u1', expiresAt });
    await first.grants.use('refresh', 'r1');
    await first.grants.put({ ...base, kind: 'revoked-token', key: 'jti1', expiresAt });
    const goneAt = Date.now() + 1;
    await first.grants.put({ ...base, kind: 'refresh', key: 'gone', expiresAt: goneAt });
    await first.grants.put({ ...base, kind: 'code', key: 'c1', expiresAt });
    await first.grants.put({ ...base, kind: 'ticket', key: 't1', expiresAt });
    await first.close();

    await clockPast(goneAt);
    const second = await fileStorage({ dir });
    try {
      expect(await second.grants.get('refresh', 'r1')).toMatchObject({
        family: 'f1',
        userId: 'u1',
        used: true,
      });
      expect(await second.grants.get('revoked-token', 'jti1')).toBeDefined();
      expect(await second.grants.get('refresh', 'gone')).toBeUndefined();
      expect(await second.grants.get('code', 'c1')).toBeUndefined();
      expect(await second.grants.get('ticket', 't1')).toBeUndefined();
      // A revocation is written too.
      await second.grants.revoke({ projectId: 'p1', userId: 'u1' });
    } finally {
      await second.close();
    }
    const third = await fileStorage({ dir });
    try {
      expect(await third.grants.get('refresh', 'r1')).toBeUndefined();
    } finally {
      await third.close();
    }
  });
});
