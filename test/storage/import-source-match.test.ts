import { describe, expect, it } from 'vitest';
import { importSourceFor } from '../../src/storage/import-source-match.js';
import type { ProjectImportSource } from '../../src/storage/types.js';

const source = (url: string): ProjectImportSource => ({
  url,
  tokenUrl: 'https://auth.example.org/token',
  clientId: url,
  privateKey: { kty: 'EC', d: 'd' },
});

const ROOT = source('https://a.example.org');
const FHIR = source('https://a.example.org/fhir');
const TENANT = source('https://a.example.org/fhir/tenant-1');
const LOCAL = source('http://localhost:8080/fhir');
const SOURCES = [ROOT, TENANT, FHIR, LOCAL];

describe('importSourceFor', () => {
  it('picks the source whose url is the longest prefix at a path-segment boundary', () => {
    expect(importSourceFor(SOURCES, 'https://a.example.org/fhir/tenant-1/$export-poll/9')).toBe(TENANT);
    expect(importSourceFor(SOURCES, 'https://a.example.org/fhir/tenant-1')).toBe(TENANT);
    expect(importSourceFor(SOURCES, 'https://a.example.org/fhir/tenant-1/')).toBe(TENANT);
    expect(importSourceFor(SOURCES, 'https://a.example.org/fhir/tenant-10/file.ndjson')).toBe(FHIR);
    expect(importSourceFor(SOURCES, 'https://a.example.org/fhir/files/1.ndjson?part=2')).toBe(FHIR);
    expect(importSourceFor(SOURCES, 'https://a.example.org/fhirx/1.ndjson')).toBe(ROOT);
    expect(importSourceFor(SOURCES, 'https://a.example.org')).toBe(ROOT);
    expect(importSourceFor(SOURCES, 'http://localhost:8080/fhir/x')).toBe(LOCAL);
  });

  it('needs the same origin: scheme, host and port', () => {
    expect(importSourceFor(SOURCES, 'http://a.example.org/fhir/x')).toBeUndefined();
    expect(importSourceFor(SOURCES, 'https://a.example.org:8443/fhir/x')).toBeUndefined();
    expect(importSourceFor(SOURCES, 'https://b.example.org/fhir/x')).toBeUndefined();
    expect(importSourceFor(SOURCES, 'http://localhost:8081/fhir/x')).toBeUndefined();
    expect(importSourceFor(SOURCES, 'http://localhost/fhir/x')).toBeUndefined();
    // The default port and the host's case make no difference.
    expect(importSourceFor(SOURCES, 'https://A.Example.org:443/fhir/x')).toBe(FHIR);
  });

  it('answers undefined without sources or for a URL that is not absolute', () => {
    expect(importSourceFor(undefined, 'https://a.example.org/fhir')).toBeUndefined();
    expect(importSourceFor([], 'https://a.example.org/fhir')).toBeUndefined();
    expect(importSourceFor([FHIR], 'https://a.example.org/other')).toBeUndefined();
    expect(importSourceFor(SOURCES, '/fhir/x')).toBeUndefined();
    expect(importSourceFor(SOURCES, 'not a url')).toBeUndefined();
  });
});
