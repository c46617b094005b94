import express from 'express';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { smartConfigurationHandler, smartSecurity } from '../../src/auth/discovery/smart-configuration.js';
import { jwksHandler } from '../../src/auth/keys/jwks-handler.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import { memoryStorage } from '../../src/stores.js';

describe('SMART discovery', () => {
  it('serves the SMART configuration under the FHIR base and at the root', async () => {
    const app = express();
    const handler = smartConfigurationHandler();
    app.get('/fhir/R4/.well-known/smart-configuration', handler);
    app.get('/.well-known/smart-configuration', handler);
    for (const path of ['/fhir/R4/.well-known/smart-configuration', '/.well-known/smart-configuration']) {
      const res = await request(app).get(path).set('Host', 'fhir.example.test');
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({
        token_endpoint: 'http://fhir.example.test/oauth2/token',
        grant_types_supported: ['client_credentials'],
        token_endpoint_auth_methods_supported: [
          'private_key_jwt',
          'client_secret_basic',
          'client_secret_post',
        ],
      });
      expect(res.body.token_endpoint_auth_signing_alg_values_supported).toEqual(
        expect.arrayContaining(['RS384', 'ES384']),
      );
      expect(res.body.scopes_supported).toContain('system/*.rs');
      expect(res.body.capabilities).toEqual([
        'client-confidential-asymmetric',
        'client-confidential-symmetric',
        'permission-v1',
        'permission-v2',
      ]);
    }
  });

  it('uses baseUrl and lists only enabled methods', async () => {
    const app = express();
    app.get(
      '/x',
      smartConfigurationHandler({
        baseUrl: 'https://fhir.example.org/',
        authMethods: ['private_key_jwt'],
        jwksEndpoint: '/oauth2/jwks',
      }),
    );
    const res = await request(app).get('/x');
    expect(res.body.token_endpoint).toBe('https://fhir.example.org/oauth2/token');
    expect(res.body.jwks_uri).toBe('https://fhir.example.org/oauth2/jwks');
    expect(res.body.capabilities).not.toContain('client-confidential-symmetric');
  });

  it('declares SMART security for the CapabilityStatement', () => {
    const security = smartSecurity('https://fhir.example.org/oauth2/token');
    expect(JSON.stringify(security)).toContain('SMART-on-FHIR');
    expect(JSON.stringify(security)).toContain('https://fhir.example.org/oauth2/token');
    // Without an authorization endpoint: backend services only, and no `authorize` URI.
    expect(security.description).toContain('SMART Backend Services');
    expect(security.description).not.toContain('SMART App Launch');
    expect(JSON.stringify(security)).not.toContain('"authorize"');
    const launch = smartSecurity('https://fhir.example.org/oauth2/token', {
      authorize: 'https://fhir.example.org/oauth2/authorize',
    });
    expect(launch.description).toContain('SMART App Launch');
    expect((launch.extension as { extension: unknown[] }[])[0]!.extension[0]).toEqual({
      url: 'authorize',
      valueUri: 'https://fhir.example.org/oauth2/authorize',
    });
  });

  it('publishes the public signing keys only', async () => {
    const storage = memoryStorage();
    const keys = signingKeys(storage);
    await keys.current();
    const app = express();
    app.get('/jwks', jwksHandler({ storage, signingKeys: keys }));
    const res = await request(app).get('/jwks');
    expect(res.status).toBe(200);
    const body = JSON.parse(res.text);
    expect(body.keys).toHaveLength(1);
    expect(body.keys[0]).not.toHaveProperty('d');
  });
});
