import { describe, expect, it } from 'vitest';
import {
  generateClientSecret,
  hashClientSecret,
  verifyClientSecret,
} from '../../src/auth/client/client-secret.js';

describe('client secrets', () => {
  it('verifies the right secret only, and never stores it in clear', async () => {
    const secret = generateClientSecret();
    const hash = await hashClientSecret(secret);
    expect(hash).not.toContain(secret);
    expect(await verifyClientSecret(secret, hash)).toBe(true);
    expect(await verifyClientSecret(`${secret}x`, hash)).toBe(false);
    expect(await verifyClientSecret(secret, 'garbage')).toBe(false);
  });
});
