import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { createAuditTrail } from '../../src/audit/trail.js';
import { bearerAuth } from '../../src/auth/access/bearer-auth.js';
import { jwksHandler } from '../../src/auth/keys/jwks-handler.js';
import { signingKeys } from '../../src/auth/keys/signing-keys.js';
import { ExportPool } from '../../src/bulk/export-pool.js';
import { tokenRouter } from '../../src/auth/token/token-router.js';
import { bulkExportRouter } from '../../src/bulk/router.js';
import { fhirRouter } from '../../src/fhir/router.js';
import { fhirPlatform } from '../../src/platform.js';
import { postgresStorage } from '../../src/postgres.js';
import { projectRouter } from '../../src/project/router.js';
import { scimRouter } from '../../src/scim/router.js';
import { fileStorage, memoryStorage } from '../../src/stores.js';
import { tempDir } from '../helpers/temp-dir.js';

const storage = memoryStorage();
const authenticate = bearerAuth({ storage });

/** Calls `create` and returns the InvalidOptionError it throws. */
function optionError(create: () => unknown): { code: string; option: string; message: string } {
  try {
    create();
  } catch (error) {
    return error as { code: string; option: string; message: string };
  }
  throw new Error('expected an InvalidOptionError');
}

describe('unknown option keys', () => {
  it.each([
    [
      'fhirPlatform',
      () => fhirPlatform({ storage, bulk: false, exportdir: '/tmp/x' } as never),
      'exportdir',
      'exportDir',
    ],
    [
      'fhirPlatform paths',
      () => fhirPlatform({ storage, bulk: false, paths: { healtz: '/h' } } as never),
      'paths.healtz',
      'paths.healthz',
    ],
    [
      'tokenRouter',
      () => tokenRouter({ storage, accesTokenLifetime: 60 } as never),
      'accesTokenLifetime',
      'accessTokenLifetime',
    ],
    [
      'scimRouter',
      () => scimRouter({ storage, authenticate, maxResult: 5 } as never),
      'maxResult',
      'maxResults',
    ],
    [
      'projectRouter',
      () => projectRouter({ storage, authenticate, allowinit: () => true } as never),
      'allowinit',
      'allowInit',
    ],
    [
      'fhirRouter',
      () => fhirRouter({ storage, authenticate, defaultcount: 5 } as never),
      'defaultcount',
      'defaultCount',
    ],
    ['bearerAuth', () => bearerAuth({ storage, allowbasic: true } as never), 'allowbasic', 'allowBasic'],
    [
      'jwksHandler',
      () => jwksHandler({ storage, signingkeys: undefined } as never),
      'signingkeys',
      'signingKeys',
    ],
    [
      'bulkExportRouter',
      () => bulkExportRouter({ storage, authenticate, retension: 5 } as never),
      'retension',
      'retention',
    ],
    [
      'memoryStorage',
      () => memoryStorage({ exportChunkByte: 64 } as never),
      'exportChunkByte',
      'exportChunkBytes',
    ],
    [
      'postgresStorage',
      // Refused before any connection is made (no database needed).
      () => postgresStorage({ connectionString: 'postgres://127.0.0.1:1/none', shema: 'fhir' } as never),
      'shema',
      'schema',
    ],
    ['signingKeys', () => signingKeys(storage, { algoritm: 'RS256' } as never), 'algoritm', 'algorithm'],
    [
      'signingKeys via tokenRouter',
      () => tokenRouter({ storage, signingKeyOptions: { retension: 60 } } as never),
      'retension',
      'retention',
    ],
    [
      'createAuditTrail',
      () => createAuditTrail({ storage, flushInterval: 10 } as never),
      'flushInterval',
      'flushIntervalMs',
    ],
    [
      'fhirPlatform audit',
      () => fhirPlatform({ storage, bulk: false, audit: { retentiondays: 30 } } as never),
      'audit.retentiondays',
      'audit.retentionDays',
    ],
    ['ExportPool', () => new ExportPool({ maxThread: 1 } as never), 'maxThread', 'maxThreads'],
    [
      'ExportPool via bulkExportRouter',
      () => bulkExportRouter({ storage, authenticate, pool: { idletimeout: 5 } } as never),
      'idletimeout',
      'idleTimeout',
    ],
  ])('%s refuses a misspelt key, suggesting the right one', (owner, create, key, near) => {
    const error = optionError(create);
    expect(error.code).toBe('ERR_INVALID_OPTION');
    expect(error.option).toBe(key);
    expect(error.message).toBe(`${owner.split(' ')[0]}: unknown option ${key} (did you mean ${near}?)`);
  });

  it('fileStorage rejects a misspelt key before it touches the directory', async () => {
    const dir = path.join(tempDir('option-keys-'), 'store');
    try {
      await expect(fileStorage({ dir, durabilty: 'write' } as never)).rejects.toMatchObject({
        code: 'ERR_INVALID_OPTION',
        option: 'durabilty',
        message: 'fileStorage: unknown option durabilty (did you mean durability?)',
      });
      expect(fs.existsSync(dir)).toBe(false);
    } finally {
      fs.rmSync(path.dirname(dir), { recursive: true, force: true });
    }
  });

  it('accepts every documented key of the storage, key and audit factories', async () => {
    const dir = tempDir('option-keys-');
    try {
      const file = await fileStorage({ dir, durability: 'write', compactionMinDeadBytes: 1024 });
      await file.close();
      expect(() => memoryStorage({ exportChunkBytes: 64 })).not.toThrow();
      expect(() =>
        signingKeys(storage, { algorithm: 'ES256', retention: 60, refreshInterval: 1, now: Date.now }),
      ).not.toThrow();
      const trail = createAuditTrail({ storage, enabled: false, batchSize: 10, flushIntervalMs: 10 });
      await trail.close();
      await new ExportPool({ maxThreads: 1, idleTimeout: 10 }).close();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('suggests nothing for a key unlike any option', () => {
    const error = optionError(() => scimRouter({ storage, authenticate, colour: 'blue' } as never));
    expect(error.option).toBe('colour');
    expect(error.message).toBe('scimRouter: unknown option colour');
  });

  it('nested router options of fhirPlatform are checked by their router', () => {
    const error = optionError(() =>
      fhirPlatform({ storage, bulk: false, scim: { echoUsername: true } } as never),
    );
    expect(error).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'echoUsername' });
    expect(error.message).toContain('did you mean echoUserName?');
  });
});

describe('token lifetime option names', () => {
  it('tokenRouter: accessTokenLifetimeCap, with maxAccessTokenLifetime as its deprecated name', () => {
    expect(() => tokenRouter({ storage, accessTokenLifetimeCap: 3600 })).not.toThrow();
    expect(() => tokenRouter({ storage, maxAccessTokenLifetime: 3600 })).not.toThrow();
    expect(optionError(() => tokenRouter({ storage, accessTokenLifetimeCap: -1 }))).toMatchObject({
      option: 'accessTokenLifetimeCap',
    });
    expect(
      optionError(() => tokenRouter({ storage, accessTokenLifetimeCap: 60, maxAccessTokenLifetime: 60 })),
    ).toMatchObject({ code: 'ERR_INVALID_OPTION', option: 'maxAccessTokenLifetime' });
  });

  it('projectRouter: min/maxClientTokenLifetime, with the former names as deprecated aliases', () => {
    expect(() => projectRouter({ storage, authenticate, maxClientTokenLifetime: 600 })).not.toThrow();
    expect(() => projectRouter({ storage, authenticate, maxAccessTokenLifetime: 600 })).not.toThrow();
    expect(
      optionError(() =>
        projectRouter({ storage, authenticate, minClientTokenLifetime: 700, maxClientTokenLifetime: 600 }),
      ),
    ).toMatchObject({ option: 'minClientTokenLifetime' });
    expect(
      optionError(() =>
        projectRouter({ storage, authenticate, maxClientTokenLifetime: 600, maxAccessTokenLifetime: 600 }),
      ),
    ).toMatchObject({ option: 'maxAccessTokenLifetime' });
  });
});
