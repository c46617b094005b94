import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { FhirResource } from '../../src/storage/types.js';
import { fileStorage } from '../../src/stores.js';
import { bulkTestApp, download, kickoff, poll, tempDir, type Manifest } from '../helpers/bulk-export.js';
import { afterTest } from '../helpers/cleanup.js';

const DATA = fileURLToPath(new URL('../../../shared/data/synthea-r4-100/', import.meta.url));
const present = fs.existsSync(DATA);

/**
 * Reads the Synthea transaction Bundles and resolves their `urn:uuid:` and conditional
 * (`Type?identifier=system|value`) references to `Type/id`, as a server's transaction would.
 */
function loadSynthea(): FhirResource[] {
  const resources: FhirResource[] = [];
  const targets = new Map<string, string>();
  for (const name of fs.readdirSync(DATA).filter((f) => f.endsWith('.json'))) {
    const doc = JSON.parse(fs.readFileSync(path.join(DATA, name), 'utf8')) as FhirResource & {
      entry?: { fullUrl?: string; resource: FhirResource }[];
    };
    const entries =
      doc.resourceType === 'Bundle' ? (doc.entry ?? []) : [{ fullUrl: `urn:uuid:${doc.id}`, resource: doc }];
    for (const { fullUrl, resource } of entries) {
      const local = `${resource.resourceType}/${resource.id}`;
      if (fullUrl) targets.set(fullUrl, local);
      for (const id of (resource.identifier as { system?: string; value?: string }[] | undefined) ?? []) {
        targets.set(`${resource.resourceType}?identifier=${id.system}|${id.value}`, local);
      }
      resources.push(resource);
    }
  }
  return resources.map(
    (r) =>
      JSON.parse(
        JSON.stringify(r).replace(/"reference":"([^"]+)"/g, (all, ref: string) =>
          targets.has(ref) ? `"reference":"${targets.get(ref)}"` : all,
        ),
      ) as FhirResource,
  );
}

describe.skipIf(!present)('Synthea sample (../shared/data/synthea-r4-100)', () => {
  it('a client polling every second completes system and Group exports', { timeout: 180_000 }, async () => {
    const storage = await fileStorage({ dir: tempDir(), durability: 'write' });
    afterTest(() => storage.close());
    const resources = loadSynthea();
    for (let i = 0; i < resources.length; i += 2000) {
      await storage.writeResources(
        'proj-a',
        resources
          .slice(i, i + 2000)
          .map((resource) => ({ op: 'update', resource: resource as FhirResource & { id: string } })),
      );
    }
    const { app, auth } = await bulkTestApp({ storage, seed: false, maxFileSize: 8 * 1024 * 1024 });

    /** As the reference clients do: poll every second until the status is no longer 202. */
    async function run(target: string): Promise<Manifest> {
      const statusPath = await kickoff(app, auth, target);
      const res = await poll(app, auth, statusPath, 1000, Infinity);
      expect(res.status).toBe(200);
      return JSON.parse(res.text) as Manifest;
    }

    async function check(manifest: Manifest): Promise<Map<string, number>> {
      const counts = new Map<string, number>();
      for (const entry of manifest.output) {
        const resources = await download(app, auth, entry.url);
        expect(resources).toHaveLength(entry.count);
        for (const r of resources) {
          expect(r.resourceType).toBe(entry.type);
          expect(r).toEqual(await storage.readResource('proj-a', r.resourceType, r.id!));
        }
        counts.set(entry.type, (counts.get(entry.type) ?? 0) + resources.length);
      }
      return counts;
    }

    const system = await check(await run('/$export'));
    const byType = new Map<string, number>();
    // Conditional creates repeat some Organizations and Practitioners: count distinct resources.
    for (const key of new Set(resources.map((r) => `${r.resourceType}/${r.id}`))) {
      const type = key.split('/')[0]!;
      byType.set(type, (byType.get(type) ?? 0) + 1);
    }
    expect(Object.fromEntries([...system].sort())).toEqual(Object.fromEntries([...byType].sort()));

    const group = resources.find((r) => r.resourceType === 'Group')!;
    const members = await check(await run(`/Group/${group.id}/$export?_type=Patient,Encounter`));
    expect(members.get('Patient')).toBe(byType.get('Patient'));
    expect(members.get('Encounter')).toBe(byType.get('Encounter'));
  });
});
