import { describe, expect, it } from 'vitest';
import request from 'supertest';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { forEachStore } from '../helpers/each-store.js';
import {
  BASE,
  openWithProjects,
  bulkTestApp,
  download,
  downloadAll,
  exportManifest,
  keysOf,
  sampleResources,
  type BulkTestApp,
} from '../helpers/bulk-export.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';

// `organizeOutputBy=Patient` (Bulk Data 3.0.0): files of patient blocks, each a Parameters header
// naming the Patient, the Patient, then the rest of its compartment; no `type` in the manifest.

/** The sample data and ten more Observations of p1: its block is larger than a small file. */
function resources(): FhirResource[] {
  const extra = Array.from({ length: 10 }, (_, i) => ({
    resourceType: 'Observation',
    id: `p1-extra-${i}`,
    status: 'final',
    code: { text: `extra ${i}` },
    subject: { reference: 'Patient/p1' },
  }));
  return [...sampleResources(), ...extra];
}

interface OrganizedManifest {
  outputOrganizedBy?: string;
  output: { type?: string; url: string; count: number; continuesInFile?: string }[];
  error: { url: string }[];
}

/** An export organized by patient (the query names `organizeOutputBy`). */
async function organized(t: BulkTestApp<Storage>, target: string): Promise<OrganizedManifest> {
  return await exportManifest(t.app, t.auth, target);
}

interface Block {
  patient: string;
  lines: FhirResource[];
  files: number[];
}

/** Downloads the files in manifest order and cuts them into blocks (a header starts each). */
async function blocksOf(t: BulkTestApp<Storage>, manifest: OrganizedManifest): Promise<Block[]> {
  const blocks: Block[] = [];
  for (const [index, entry] of manifest.output.entries()) {
    expect(entry).not.toHaveProperty('type');
    const lines = await download(t.app, t.auth, entry.url);
    expect(lines).toHaveLength(entry.count);
    expect(lines[0]?.resourceType).toBe('Parameters');
    for (const line of lines) {
      if (line.resourceType !== 'Parameters') {
        blocks.at(-1)!.lines.push(line);
        continue;
      }
      const reference = (
        line as unknown as { parameter: { name: string; valueReference: { reference: string } }[] }
      ).parameter[0]!;
      expect(reference.name).toBe('header');
      const patient = reference.valueReference.reference.replace('Patient/', '');
      const last = blocks.at(-1);
      // A header repeated at the start of a file continues the block of the file before.
      const continued = last?.patient === patient && line === lines[0] && index > 0;
      if (continued) {
        expect(manifest.output[index - 1]!.continuesInFile).toBe(entry.url);
        last.files.push(index);
      } else blocks.push({ patient, lines: [], files: [index] });
    }
  }
  return blocks;
}

/** The patients a sample resource names (its subject, a Group's members, a Patient itself). */
const patientsOf = (resource: FhirResource): (string | undefined)[] => {
  if (resource.resourceType === 'Patient') return [resource.id];
  const members = (resource as { member?: { entity: { reference: string } }[] }).member;
  if (members) return members.map((m) => m.entity.reference.replace('Patient/', ''));
  const subject = (resource as { subject?: { reference?: string } | { reference?: string }[] }).subject;
  const reference = Array.isArray(subject) ? subject[0]?.reference : subject?.reference;
  return [reference?.replace('Patient/', '')];
};

forEachStore('organizeOutputBy', (store, open) =>
  describe(`organizeOutputBy=Patient (${store} store)`, () => {
    async function setup(maxFileSize?: number) {
      const storage = await openWithProjects(open);
      return bulkTestApp({ storage, seed: resources(), ...(maxFileSize ? { maxFileSize } : {}) });
    }

    it('Patient level: one block per patient, the Patient first, every resource of its compartment', async () => {
      const t = await setup();
      const plain = await exportManifest(t.app, t.auth, '/Patient/$export');
      const expected = keysOf(await downloadAll(t.app, t.auth, plain));
      const m = await organized(t, '/Patient/$export?organizeOutputBy=Patient');
      expect(m.outputOrganizedBy).toBe('Patient');
      const blocks = await blocksOf(t, m);
      expect(blocks.map((b) => b.patient).sort()).toEqual(['p1', 'p2', 'p3', 'p4']);
      for (const block of blocks) {
        expect(block.lines[0]).toMatchObject({ resourceType: 'Patient', id: block.patient });
        for (const line of block.lines) expect(patientsOf(line)).toContain(block.patient);
      }
      const keys = blocks.flatMap((b) => b.lines.map((r) => `${r.resourceType}/${String(r.id)}`));
      // A resource in several compartments (g2 has p3 and p4) is in each of their blocks.
      expect([...new Set(keys)].sort()).toEqual(expected);
      expect(keys.filter((k) => k === 'Group/g2')).toHaveLength(2);
    });

    it('splits files between blocks only; a block larger than a file goes on in the next, its header repeated', async () => {
      const t = await setup(1200);
      const m = await organized(t, '/Patient/$export?organizeOutputBy=Patient&_type=Patient,Observation');
      const blocks = await blocksOf(t, m);
      expect(blocks.map((b) => b.patient).sort()).toEqual(['p1', 'p2', 'p3', 'p4']);
      const p1 = blocks.find((b) => b.patient === 'p1')!;
      expect(p1.lines).toHaveLength(12);
      // p1's block (13 lines of about 150 bytes and more) is larger than a file of 1200 bytes.
      expect(p1.files.length).toBeGreaterThan(1);
      for (const block of blocks.filter((b) => b.patient !== 'p1')) expect(block.files).toHaveLength(1);
      expect(m.output.filter((o) => o.continuesInFile).length).toBe(p1.files.length - 1);
    });

    it('Group and system level; _type narrows the blocks; resources in no compartment are left out', async () => {
      const t = await setup();
      const group = await organized(t, '/Group/g1/$export?organizeOutputBy=Patient&_type=Observation');
      const groupBlocks = await blocksOf(t, group);
      expect(groupBlocks.map((b) => b.patient).sort()).toEqual(['p1', 'p3']);
      for (const block of groupBlocks)
        for (const line of block.lines) expect(line.resourceType).toBe('Observation');
      const system = await organized(t, '/$export?organizeOutputBy=Patient');
      const keys = (await blocksOf(t, system)).flatMap((b) => b.lines.map((r) => r.resourceType));
      expect(keys).not.toContain('Organization');
      expect(keys.filter((type) => type === 'Patient')).toHaveLength(4);
    });
  }),
);

describe('organizeOutputBy, kick-off', () => {
  it('is 400 for another type, a malformed value, or with includeAssociatedData; lenient drops it', async () => {
    const { app, auth } = await bulkTestApp();
    for (const query of [
      'organizeOutputBy=Observation',
      'organizeOutputBy=nothing',
      'organizeOutputBy=Patient&includeAssociatedData=LatestProvenanceResources',
    ]) {
      const res = await request(app)
        .get(`${BASE}/Patient/$export?${query}`)
        .set('Authorization', auth)
        .set('Prefer', 'respond-async');
      expectOperationOutcome(res, 400);
    }
    const lenient = await exportManifest(
      app,
      auth,
      '/Patient/$export?_type=Patient&organizeOutputBy=Observation',
      {
        prefer: 'respond-async, handling=lenient',
      },
    );
    expect(lenient.output.map((o) => o.type)).toEqual(['Patient']);
    expect(lenient.error).toHaveLength(1);
  });
});
