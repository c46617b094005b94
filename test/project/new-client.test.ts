import { generateKeyPairSync } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { FhirError } from '../../src/http/http-error.js';
import {
  checkClientScope,
  isAcceptableJwksUri,
  parseNewClientParameters,
  type NewClientRules,
} from '../../src/project/new-client.js';
import { parsePublicJwks } from '../../src/project/public-jwks.js';

const RULES: NewClientRules = {
  defaultScope: 'system/*.*',
  minClientTokenLifetime: 60,
  maxClientTokenLifetime: 86400,
  allowHttpJwksUri: false,
  allowPrivateJwksAddresses: true,
  allowPrivateImportAddresses: true,
};

const p = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });
const named = { name: 'name', valueString: 'Backend' };

function keyPair(type: 'ec' | 'rsa' | 'ed25519') {
  const pair =
    type === 'ec'
      ? generateKeyPairSync('ec', { namedCurve: 'P-384' })
      : type === 'rsa'
        ? generateKeyPairSync('rsa', { modulusLength: 2048 })
        : generateKeyPairSync('ed25519');
  return {
    publicJwk: pair.publicKey.export({ format: 'jwk' }) as Record<string, unknown>,
    privateJwk: pair.privateKey.export({ format: 'jwk' }) as Record<string, unknown>,
  };
}

function expressionOf(fn: () => unknown): string[] | undefined {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(FhirError);
    expect((error as FhirError).status).toBe(400);
    return (error as FhirError).expression;
  }
  throw new Error('expected a failure');
}

describe('parsePublicJwks', () => {
  it('accepts EC, RSA and OKP public keys', () => {
    const keys = [
      { ...keyPair('ec').publicJwk, kid: 'a', alg: 'ES384' },
      { ...keyPair('rsa').publicJwk, kid: 'b', alg: 'RS384', use: 'sig' },
      keyPair('ed25519').publicJwk,
    ];
    const result = parsePublicJwks(JSON.stringify({ keys }));
    expect(result).toEqual({ ok: true, jwks: { keys } });
  });

  it.each([
    ['not JSON', '{'],
    ['not an object', '[]'],
    ['no keys', '{}'],
    ['empty keys', '{"keys":[]}'],
    ['a non-object key', '{"keys":[1]}'],
    ['a symmetric key', JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0' }] })],
    ['a private EC key', JSON.stringify({ keys: [keyPair('ec').privateJwk] })],
    ['a private RSA key', JSON.stringify({ keys: [keyPair('rsa').privateJwk] })],
    ['an HMAC alg', JSON.stringify({ keys: [{ ...keyPair('ec').publicJwk, alg: 'HS256' }] })],
    ['an encryption key', JSON.stringify({ keys: [{ ...keyPair('ec').publicJwk, use: 'enc' }] })],
    ['a broken key', JSON.stringify({ keys: [{ kty: 'EC', crv: 'P-256', x: 'AAAA', y: 'BBBB' }] })],
    [
      'too many keys',
      JSON.stringify({ keys: Array.from({ length: 21 }, () => keyPair('ed25519').publicJwk) }),
    ],
    [
      'a key member nested 5,000 deep',
      JSON.stringify({ keys: [{ ...keyPair('ec').publicJwk, x5c: 'DEEP' }] }).replace(
        '"DEEP"',
        `${'['.repeat(5000)}${']'.repeat(5000)}`,
      ),
    ],
  ])('refuses %s', (_label, text) => {
    expect(parsePublicJwks(text).ok).toBe(false);
  });
});

describe('checkClientScope', () => {
  it('normalises valid scopes', () => {
    expect(checkClientScope(' system/*.rs  system/Patient.read openid system/*.rs')).toEqual({
      ok: true,
      scope: 'system/*.rs system/Patient.read openid',
    });
  });

  it('takes patient/ and user/ scopes, v1 and v2 (what SMART apps are registered for)', () => {
    expect(checkClientScope('patient/*.read user/Observation.rs launch/patient openid fhirUser')).toEqual({
      ok: true,
      scope: 'patient/*.read user/Observation.rs launch/patient openid fhirUser',
    });
  });

  it('accepts SMART App Launch scopes: patient/, user/, identity, launch and refresh', () => {
    const scope =
      'patient/*.read patient/Observation.rs user/*.cruds openid fhirUser launch/patient offline_access online_access';
    expect(checkClientScope(scope)).toEqual({ ok: true, scope });
  });

  it.each([
    'system/*.x',
    'patient/*.x',
    'patient/Observation.rs?category=laboratory',
    'system/Observation.rs?category=lab',
    'a"b',
    'a\tb',
    'system/patient.read',
    '',
  ])('refuses %j', (scope) => {
    expect(checkClientScope(scope).ok).toBe(false);
  });
});

describe('isAcceptableJwksUri', () => {
  it.each([
    ['https://keys.example.org/jwks.json', false, true],
    ['http://127.0.0.1:8080/jwks', false, true],
    ['http://localhost/jwks', false, true],
    ['http://[::1]/jwks', false, true],
    ['http://keys.example.org/jwks', false, false],
    ['http://keys.example.org/jwks', true, true],
    ['https://user:pw@keys.example.org/jwks', false, false],
    ['https://keys.example.org/jwks#frag', false, false],
    ['ftp://keys.example.org/jwks', false, false],
    ['not a url', false, false],
  ])('%s (allowHttp %s) -> %s', (uri, allowHttp, expected) => {
    expect(isAcceptableJwksUri(uri, allowHttp)).toBe(expected);
  });
});

describe('parseNewClientParameters', () => {
  it('applies defaults', () => {
    expect(parseNewClientParameters(p(named), RULES)).toEqual({
      name: 'Backend',
      scope: 'system/*.*',
      admin: false,
    });
  });

  it('reads every parameter', () => {
    const jwks = { keys: [keyPair('ec').publicJwk] };
    expect(
      parseNewClientParameters(
        p(
          named,
          { name: 'jwks', valueString: JSON.stringify(jwks) },
          { name: 'scope', valueString: 'system/*.rs' },
          { name: 'admin', valueBoolean: true },
          { name: 'accessTokenLifetime', valueInteger: 600 },
        ),
        RULES,
      ),
    ).toEqual({ name: 'Backend', jwks, scope: 'system/*.rs', admin: true, accessTokenLifetime: 600 });
    expect(
      parseNewClientParameters(p(named, { name: 'jwksUri', valueUri: 'https://k.example/j' }), RULES).jwksUri,
    ).toBe('https://k.example/j');
  });

  it.each([
    ['missing name', p({ name: 'admin', valueBoolean: true }), 'Parameters.parameter'],
    [
      'private key material',
      p(named, { name: 'jwks', valueString: JSON.stringify({ keys: [keyPair('ec').privateJwk] }) }),
      'Parameters.parameter[1].valueString',
    ],
    [
      'both jwks and jwksUri',
      p(named, { name: 'jwksUri', valueUri: 'https://k.example/j' }, { name: 'jwks', valueString: '{}' }),
      'Parameters.parameter[2]',
    ],
    [
      'a plain-http jwksUri',
      p(named, { name: 'jwksUri', valueUri: 'http://k.example/j' }),
      'Parameters.parameter[1].valueUri',
    ],
    [
      'a bad scope',
      p(named, { name: 'scope', valueString: 'system/*.zz' }),
      'Parameters.parameter[1].valueString',
    ],
    [
      'admin as string',
      p(named, { name: 'admin', valueString: 'true' }),
      'Parameters.parameter[1].valueString',
    ],
    [
      'a short lifetime',
      p(named, { name: 'accessTokenLifetime', valueInteger: 59 }),
      'Parameters.parameter[1].valueInteger',
    ],
    [
      'a long lifetime',
      p(named, { name: 'accessTokenLifetime', valueInteger: 86401 }),
      'Parameters.parameter[1].valueInteger',
    ],
  ])('rejects %s', (_label, body, expression) => {
    expect(expressionOf(() => parseNewClientParameters(body, RULES))).toEqual([expression]);
  });
});

describe('jwksUri addresses', () => {
  // The probe's jwksUris (issue 28 item 7), and more non-public addresses.
  const NON_PUBLIC = [
    'http://127.0.0.1:5432/',
    'http://[::1]:6379/',
    'http://2130706433:5432/',
    'https://169.254.169.254/latest/meta-data/',
    'http://localhost:8080/jwks',
    'https://10.0.0.5/jwks',
    'https://192.168.1.10/jwks',
    'https://100.64.0.1/jwks',
    'https://0.0.0.0/jwks',
    'https://[fd00::1]/jwks',
    'https://[fe80::1]/jwks',
    'https://[::ffff:127.0.0.1]/jwks',
  ];
  const jwksUri = (uri: string) => p(named, { name: 'jwksUri', valueUri: uri });
  const strict = { ...RULES, allowPrivateJwksAddresses: false };

  it.each(NON_PUBLIC)('refuses %s unless private addresses are allowed', (uri) => {
    expect(expressionOf(() => parseNewClientParameters(jwksUri(uri), strict))).toEqual([
      'Parameters.parameter[1].valueUri',
    ]);
    expect(parseNewClientParameters(jwksUri(uri), RULES).jwksUri).toBe(uri);
  });

  it('accepts public addresses and names (what a name resolves to is checked when fetching)', () => {
    for (const uri of [
      'https://keys.example.org/jwks.json',
      'https://8.8.8.8/jwks',
      'https://[2606:4700::1111]/j',
    ]) {
      expect(parseNewClientParameters(jwksUri(uri), strict).jwksUri).toBe(uri);
    }
  });
});
