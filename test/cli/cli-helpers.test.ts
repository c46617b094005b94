import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { countLines, kickoffUrl, retryAfterMs } from '../../src/cli/export.js';
import { reasonOf } from '../../src/cli/server-client.js';
import { serveEnvironment } from '../../src/cli/serve-settings.js';
import { tempDir } from '../helpers/temp-dir.js';

const BASE = 'https://fhir.example.org/api/fhir/R4';

describe('export helpers', () => {
  it('builds the kick-off URL of each level with its parameters', () => {
    expect(kickoffUrl(BASE, { fhirUrl: BASE, out: 'x' })).toBe(`${BASE}/$export`);
    expect(
      kickoffUrl(BASE, { fhirUrl: BASE, out: 'x', patient: true, since: '2024-01-02T03:04:05+01:00' }),
    ).toBe(`${BASE}/Patient/$export?_since=2024-01-02T03%3A04%3A05%2B01%3A00`);
    const group = new URL(
      kickoffUrl(BASE, {
        fhirUrl: BASE,
        out: 'x',
        group: 'g 1',
        type: ['Patient, Observation', 'Condition'],
        typeFilter: ['Observation?code=1', 'Condition?code=2'],
        outputFormat: 'application/fhir+ndjson',
      }),
    );
    expect(group.pathname).toBe('/api/fhir/R4/Group/g%201/$export');
    expect(group.searchParams.get('_type')).toBe('Patient,Observation,Condition');
    expect(group.searchParams.getAll('_typeFilter')).toEqual(['Observation?code=1', 'Condition?code=2']);
    expect(group.searchParams.get('_outputFormat')).toBe('application/fhir+ndjson');
    expect(() => kickoffUrl(BASE, { fhirUrl: BASE, out: 'x', patient: true, group: 'g' })).toThrow(
      /not both/,
    );
  });

  it('reads Retry-After as seconds or an HTTP date, bounded to [0.1 s, 60 s], 1 s when absent', () => {
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs(null)).toBe(1000);
    expect(retryAfterMs('3')).toBe(3000);
    expect(retryAfterMs('0')).toBe(100);
    expect(retryAfterMs('3600')).toBe(60_000);
    expect(retryAfterMs('Thu, 01 Jan 2026 00:00:05 GMT', now)).toBe(5000);
    expect(retryAfterMs('soon')).toBe(1000);
  });

  it('counts NDJSON lines: a last line without a newline counts, blank lines do not', async () => {
    const dir = tempDir('fpk-cli-lines-');
    const file = path.join(dir, 'a.ndjson');
    const cases: [string, number][] = [
      ['', 0],
      ['{}\n', 1],
      ['{}\n{}', 2],
      ['{}\r\n\n  \n{}\r\n', 2],
      [`${'{"a":1}\n'.repeat(100_000)}`, 100_000],
    ];
    for (const [text, lines] of cases) {
      fs.writeFileSync(file, text);
      expect(await countLines(file)).toBe(lines);
    }
  });
});

describe('error answers', () => {
  it('reduces OperationOutcome, OAuth and SCIM errors to one line', () => {
    expect(
      reasonOf(
        JSON.stringify({
          resourceType: 'OperationOutcome',
          issue: [
            { severity: 'error', code: 'invalid', details: { text: 'a' } },
            { severity: 'warning', code: 'invalid', details: { text: 'ignored' } },
            { severity: 'fatal', code: 'invalid', diagnostics: 'b' },
          ],
        }),
      ),
    ).toBe('a; b');
    expect(reasonOf('{"error":"invalid_client","error_description":"bad secret"}')).toBe(
      'invalid_client: bad secret',
    );
    expect(reasonOf('{"error":"invalid_client"}')).toBe('invalid_client');
    expect(reasonOf('{"schemas":[],"detail":"no such user","status":"404"}')).toBe('no such user');
    expect(reasonOf('<html>Bad gateway</html>\n')).toBe('<html>Bad gateway</html>');
  });
});

describe('serve flags', () => {
  it('win over the environment variables they stand for', () => {
    const env = serveEnvironment(
      { port: '9000', dataDir: '/srv/fhir', scimEchoUserName: true, allowPrivateJwksAddresses: true },
      { PORT: '8103', HOST: '127.0.0.1', DATA_DIR: './data' },
    );
    expect(env).toMatchObject({
      PORT: '9000',
      HOST: '127.0.0.1',
      DATA_DIR: '/srv/fhir',
      SCIM_ECHO_USER_NAME: 'true',
      ALLOW_PRIVATE_JWKS_ADDRESSES: 'true',
    });
  });
});
