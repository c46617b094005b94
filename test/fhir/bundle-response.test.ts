import { describe, expect, it } from 'vitest';
import { bundleBytes, writeResponseOf, type BundleJson } from '../../src/fhir/bundle/bundle-response.js';
import type { StoredResource, WriteResult } from '../../src/storage/types.js';

/** A written Patient; `measured`: its stored text comes with its UTF-8 length, as the engine stores give it. */
function written(versionId: string, lastUpdated: string, family: string, measured: boolean): WriteResult {
  const resource = {
    resourceType: 'Patient',
    id: 'p-1',
    meta: { versionId, lastUpdated },
    name: [{ family }],
  } as StoredResource;
  const json = JSON.stringify(resource);
  const bytes = measured ? { bytes: Buffer.byteLength(json) } : {};
  return {
    op: 'create',
    stored: { json, ...bytes, resourceType: 'Patient', id: 'p-1', versionId, lastUpdated },
    get resource() {
      return JSON.parse(json) as StoredResource;
    },
  };
}

describe('bundleBytes', () => {
  it('writes a written entry from its parts exactly as its JSON form, escaping what needs it', () => {
    const cases = [];
    for (const returnMinimal of [false, true])
      for (const baseUrl of ['https://example.org/fhir "R4" é', 'http://127.0.0.1:8080/fhir/R4'])
        // A family name whose UTF-8 is longer than its text, and one whose is not.
        for (const family of ['Zoë "Q"', 'Doe'])
          for (const measured of [true, false])
            for (const [versionId, lastUpdated] of [
              ['1', '2026-11-25T18:00:00.123456Z'],
              ['v"2\\', 'not plain: "quoted"'], // parts no store makes: the JSON form is written instead
            ] as const)
              cases.push({ returnMinimal, baseUrl, family, measured, versionId, lastUpdated });
    for (const { returnMinimal, baseUrl, family, measured, versionId, lastUpdated } of cases) {
      const options = { baseUrl, returnMinimal };
      const write = written(versionId, lastUpdated, family, measured);
      const bundle: BundleJson = {
        resourceType: 'Bundle',
        id: 'b',
        type: 'transaction-response',
        entry: [writeResponseOf('201 Created', write, options), { response: { status: '204 No Content' } }],
      };
      const answer = JSON.parse(bundleBytes(bundle).toString('utf8')) as BundleJson;
      expect(answer).toEqual(JSON.parse(JSON.stringify(bundle)));
      expect(answer.entry?.[0]).toEqual({
        fullUrl: `${options.baseUrl}/Patient/p-1`,
        ...(returnMinimal ? {} : { resource: JSON.parse(write.stored!.json) }),
        response: {
          status: '201 Created',
          location: `Patient/p-1/_history/${versionId}`,
          etag: `W/"${versionId}"`,
          lastModified: lastUpdated,
        },
      });
    }
  });
});
