import fs from 'node:fs';
import path from 'node:path';
import type { FhirResource } from '../src/storage/types.js';

interface BundleEntry {
  fullUrl?: string;
  resource?: FhirResource;
}

/**
 * Every resource of a directory of Synthea transaction/batch Bundles, with the bundles' `urn:uuid:`
 * and conditional (`Type?identifier=system|value`) references rewritten to `Type/id`, as a server's
 * transaction processing leaves them.
 */
export function readSynthea(dir: string): FhirResource[] {
  const resources: FhirResource[] = [];
  const local = new Map<string, string>();
  for (const name of fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .sort()) {
    const doc = JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8')) as FhirResource & {
      entry?: BundleEntry[];
    };
    if (doc.resourceType !== 'Bundle') continue;
    for (const { fullUrl, resource } of doc.entry ?? []) {
      if (!resource?.id) continue;
      const target = `${resource.resourceType}/${resource.id}`;
      if (fullUrl) local.set(fullUrl, target);
      const identifiers = (resource.identifier ?? []) as { system?: string; value?: string }[];
      for (const { system, value } of identifiers) {
        local.set(`${resource.resourceType}?identifier=${system ?? ''}|${value ?? ''}`, target);
      }
      resources.push(resource);
    }
  }
  const pattern = /"reference":"([^"]+)"/g;
  return resources.map((resource) => {
    const text = JSON.stringify(resource);
    const rewritten = text.replace(pattern, (whole, ref: string) => {
      const target = local.get(ref);
      return target ? `"reference":"${target}"` : whole;
    });
    return rewritten === text ? resource : (JSON.parse(rewritten) as FhirResource);
  });
}
