import { describe, expect, it } from 'vitest';
import { readConfig } from '../../src/cli/serve-config.js';

describe('serve: the default identity provider (IDP_*)', () => {
  it('reads the provider with its defaults', () => {
    const config = readConfig({ IDP_ISSUER: 'http://localhost:8104/', IDP_CLIENT_ID: 'fhir-platform' });
    expect(config).toMatchObject({
      idpIssuer: 'http://localhost:8104',
      idpClientId: 'fhir-platform',
      idpScope: 'openid email profile',
      idpClaim: 'email',
      idpMatch: 'email',
    });
    expect(readConfig({}).idpIssuer).toBeUndefined();
  });

  it('refuses incomplete or contradictory settings, and http off this machine', () => {
    expect(() => readConfig({ IDP_ISSUER: 'https://idp.example.org' })).toThrow(/IDP_CLIENT_ID/);
    expect(() => readConfig({ IDP_CLIENT_SECRET: 's' })).toThrow(/IDP_ISSUER/);
    const both = { IDP_ISSUER: 'https://idp.example.org', IDP_CLIENT_ID: 'c', IDP_CLIENT_SECRET: 's' };
    expect(() => readConfig({ ...both, IDP_PRIVATE_KEY_FILE: 'key.json' })).toThrow(/not both/);
    expect(() => readConfig({ IDP_ISSUER: 'http://idp.example.org', IDP_CLIENT_ID: 'c' })).toThrow(
      /IDP_ISSUER/,
    );
    expect(() => readConfig({ ...both, IDP_MATCH: 'phone' })).toThrow(/IDP_MATCH/);
    expect(() => readConfig({ ...both, IDP_SCOPE: 'email' })).toThrow(/IDP_SCOPE/);
  });
});
