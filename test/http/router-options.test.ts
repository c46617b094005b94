// Every router factory checks the options it shares with the others through one validator
// (checkRouterOptions), when it is called: a bad value of a shared key is an InvalidOptionError
// (`ERR_INVALID_OPTION`) naming that key, whichever router it is given to, never a library's own
// error at creation nor a failure at the first request.
import { describe, expect, it } from 'vitest';
import { bearerAuth } from '../../src/auth/access/bearer-auth.js';
import { tokenRouter } from '../../src/auth/token/token-router.js';
import { bulkExportRouter } from '../../src/bulk/router.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { fhirPlatform } from '../../src/platform.js';
import { projectRouter } from '../../src/project/router.js';
import { scimRouter } from '../../src/scim/router.js';
import { memoryStorage } from '../../src/stores.js';

const storage = memoryStorage();
const authenticate = bearerAuth({ storage });
const noop = (): void => undefined;
const logger = { error: noop, warn: noop, info: noop, debug: noop };

/** Each factory with the least options it needs (and whether it takes `authenticate`, `bodyLimit`). */
const FACTORIES: [string, (extra: Record<string, unknown>) => unknown, { auth: boolean; body: boolean }][] = [
  ['tokenRouter', (extra) => tokenRouter({ storage, ...extra }), { auth: false, body: false }],
  ['scimRouter', (extra) => scimRouter({ storage, authenticate, ...extra }), { auth: true, body: true }],
  [
    'projectRouter',
    (extra) => projectRouter({ storage, authenticate, ...extra }),
    { auth: true, body: true },
  ],
  ['fhirRouter', (extra) => fhirRouter({ storage, authenticate, ...extra }), { auth: true, body: true }],
  [
    'bulkExportRouter',
    (extra) => bulkExportRouter({ storage, authenticate, ...extra }),
    { auth: true, body: false },
  ],
  [
    'fhirPlatform',
    (extra) => fhirPlatform({ storage, bulk: false, ...extra } as never),
    { auth: true, body: false },
  ],
];

/** Bad values of each shared key. */
const BAD: [string, unknown][] = [
  ['storage', 'banana'],
  ['storage', undefined],
  ['authenticate', 'banana'],
  ['baseUrl', 'banana'],
  ['baseUrl', 'ftp://fhir.example.org'],
  ['baseUrl', 42],
  ['onError', 'banana'],
  ['logger', 'banana'],
  ['logger', { error: noop }],
  ['logger', { ...logger, child: 'banana' }],
  ['auditTrail', {}],
  ['auditTrail', 'banana'],
  ['bodyLimit', 'banana'],
  ['bodyLimit', 0],
  ['bodyLimit', -1],
  ['bodyLimit', '-1mb'],
  ['bodyLimit', { size: 1 }],
];

/** Calls `create` and returns what it throws. */
function thrown(create: () => unknown): { code?: string; option?: string; message?: string } {
  try {
    create();
  } catch (error) {
    return error as { code?: string; option?: string; message?: string };
  }
  throw new Error('expected an InvalidOptionError');
}

const cases = FACTORIES.flatMap(([owner, create, takes]) =>
  BAD.filter(([key]) => (key !== 'authenticate' || takes.auth) && (key !== 'bodyLimit' || takes.body))
    // fhirPlatform passes its trail to every router; `auditTrail` is not one of its options.
    .filter(([key]) => !(owner === 'fhirPlatform' && key === 'auditTrail'))
    .map(([key, value]) => [owner, key, value, create] as const),
);

describe('shared router options', () => {
  it.each(cases)('%s refuses a bad %s (%j) with ERR_INVALID_OPTION', (owner, key, value, create) => {
    const error = thrown(() => create({ [key]: value }));
    expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: key });
    expect(error.message?.startsWith(`${owner}: `)).toBe(true);
  });

  it.each(FACTORIES.filter(([, , takes]) => !takes.body))('%s has no bodyLimit option', (owner, create) => {
    expect(thrown(() => create({ bodyLimit: '1mb' }))).toMatchObject({
      code: 'ERR_INVALID_OPTION',
      option: 'bodyLimit',
    });
  });

  it('tokenRouter has no authenticate option (it authenticates clients itself)', () => {
    expect(thrown(() => tokenRouter({ storage, authenticate } as never))).toMatchObject({
      code: 'ERR_INVALID_OPTION',
      option: 'authenticate',
    });
  });

  it.each([
    ['tokenRouter', tokenRouter],
    ['scimRouter', scimRouter],
    ['projectRouter', projectRouter],
    ['fhirRouter', fhirRouter],
    ['bulkExportRouter', bulkExportRouter],
    ['fhirPlatform', fhirPlatform],
  ] as const)('%s refuses options that are not an object', (owner, factory) => {
    for (const options of [undefined, null, 'banana']) {
      const error = thrown(() => (factory as (options: unknown) => unknown)(options));
      expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'options' });
      expect(error.message).toBe(`${owner}: options are required`);
    }
  });

  it.each(FACTORIES)('%s accepts good values of every shared key it takes', async (_owner, create, takes) => {
    const good = {
      baseUrl: 'https://fhir.example.org/base',
      onError: noop,
      logger: { ...logger, child: () => logger },
      ...(takes.body ? { bodyLimit: '2mb' } : {}),
    };
    const made = create(good) as { close?: () => Promise<void> };
    await made.close?.();
    const numeric = takes.body ? (create({ bodyLimit: 1024 }) as { close?: () => Promise<void> }) : undefined;
    await numeric?.close?.();
  });
});
