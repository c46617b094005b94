import { describe, expect, it } from 'vitest';
import { bundleBytes, writeResponseOf, type BundleJson } from '../../src/fhir/bundle-response.js';
import type { StoredResource, WriteResult } from '../../src/storage/types.js';

function written(versionId: string, lastUpdated: string): WriteResult {
  const resource = {
    resourceType: 'Patient',
    id: 'p-1',
    meta: { versionId, lastUpdated },
    name: [{ family: 'Zoë "Q"' }],
  } as StoredResource;
  const json = JSON.stringify(resource);
  return {
    op: 'create',
    stored: { json, resourceType: 'Patient', id: 'p-1', versionId, lastUpdated },
    get resource() {
      return JSON.parse(json) as StoredResource;
    },
  };
}

describe('bundleBytes', () => {
  it('writes a written entry from its parts exactly as its JSON form, escaping what needs it', () => {
    for (const returnMinimal of [false, true]) {
      for (const [versionId, lastUpdated] of [
        ['1', '2026-11-25T18:00:00.123456Z'],
        ['v"2\\', 'not plain: "quoted"'], // parts no store makes: the JSON form is written instead
      ] as const) {
        const options = { baseUrl: 'https://example.org/fhir "R4" é', returnMinimal };
        const bundle: BundleJson = {
          resourceType: 'Bundle',
          id: 'b',
          type: 'transaction-response',
          entry: [
            writeResponseOf('201 Created', written(versionId, lastUpdated), options),
            { response: { status: '204 No Content' } },
          ],
        };
        const answer = JSON.parse(bundleBytes(bundle).toString('utf8')) as BundleJson;
        expect(answer).toEqual(JSON.parse(JSON.stringify(bundle)));
        expect(answer.entry?.[0]).toEqual({
          fullUrl: `${options.baseUrl}/Patient/p-1`,
          ...(returnMinimal ? {} : { resource: JSON.parse(written(versionId, lastUpdated).stored!.json) }),
          response: {
            status: '201 Created',
            location: `Patient/p-1/_history/${versionId}`,
            etag: `W/"${versionId}"`,
            lastModified: lastUpdated,
          },
        });
      }
    }
  });
});
