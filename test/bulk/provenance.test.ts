import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { AssociatedProvenance, referenceKey } from '../../src/bulk/provenance.js';
import type { NdjsonChunk } from '../../src/storage/types.js';

const provenance = (id: string, recorded: string, ...targets: string[]) => ({
  resourceType: 'Provenance',
  id,
  meta: { versionId: '1', lastUpdated: '2024-01-01T00:00:00Z' },
  target: targets.map((reference) => ({ reference })),
  recorded,
  agent: [{ who: { reference: 'Organization/org' } }],
});

/** The Provenance of a snapshot, read in chunks of two lines (bytes and text alternately). */
function reader(resources: object[]): () => AsyncIterable<NdjsonChunk> {
  const chunks: NdjsonChunk[] = [];
  for (let i = 0; i < resources.length; i += 2) {
    const text = resources
      .slice(i, i + 2)
      .map((r) => `${JSON.stringify(r)}\n`)
      .join('');
    chunks.push({ data: i % 4 === 0 ? Buffer.from(text) : text, count: Math.min(2, resources.length - i) });
  }
  return () => Readable.from(chunks, { objectMode: true }) as AsyncIterable<NdjsonChunk>;
}

async function ids(associated: AssociatedProvenance, resources: object[]): Promise<string[]> {
  const out: string[] = [];
  for await (const { line, resource } of associated.select(reader(resources))) {
    expect(JSON.parse(line)).toEqual(resource);
    out.push(resource.id);
  }
  return out.sort();
}

describe('referenceKey', () => {
  it('reads relative, absolute and versioned literal references; ignores the others', () => {
    expect(referenceKey('Observation/o1')).toBe('Observation/o1');
    expect(referenceKey('https://x.org/fhir/R4/Observation/o1')).toBe('Observation/o1');
    expect(referenceKey('Observation/o1/_history/3')).toBe('Observation/o1');
    expect(referenceKey('#contained')).toBeUndefined();
    expect(referenceKey('urn:uuid:8d4f0a9e-0000-4000-8000-000000000000')).toBeUndefined();
    expect(referenceKey('observation/o1')).toBeUndefined();
  });
});

describe('AssociatedProvenance', () => {
  const store = [
    provenance('p-old', '2024-01-01T00:00:00Z', 'Observation/o1', 'Observation/o2'),
    provenance('p-new', '2024-06-01T00:00:00Z', 'Observation/o1'),
    provenance('p-other', '2024-07-01T00:00:00Z', 'Observation/o9'),
    provenance('p-abs', '2023-01-01T00:00:00Z', 'https://x.org/fhir/Condition/c1/_history/2'),
    provenance('p-none', '2025-01-01T00:00:00Z'),
  ];

  it('Relevant: every Provenance targeting an exported resource', async () => {
    const associated = new AssociatedProvenance(['RelevantProvenanceResources']);
    for (const id of ['o1', 'o2']) associated.note('Observation', id);
    associated.note('Condition', 'c1');
    expect(await ids(associated, store)).toEqual(['p-abs', 'p-new', 'p-old']);
  });

  it('Latest: per exported resource the latest by recorded; Relevant wins when both are given', async () => {
    const latest = new AssociatedProvenance(['LatestProvenanceResources']);
    for (const id of ['o1', 'o2']) latest.note('Observation', id);
    // o1 -> p-new (later than p-old), o2 -> p-old (its only one).
    expect(await ids(latest, store)).toEqual(['p-new', 'p-old']);
    const onlyO1 = new AssociatedProvenance(['LatestProvenanceResources']);
    onlyO1.note('Observation', 'o1');
    expect(await ids(onlyO1, store)).toEqual(['p-new']);
    const both = new AssociatedProvenance(['LatestProvenanceResources', 'RelevantProvenanceResources']);
    expect(both.latestOnly).toBe(false);
  });

  it('leaves out Provenance already exported, and adds nothing when nothing was exported', async () => {
    const associated = new AssociatedProvenance(['RelevantProvenanceResources']);
    associated.note('Observation', 'o1');
    associated.note('Provenance', 'p-old');
    expect(await ids(associated, store)).toEqual(['p-new']);
    expect(await ids(new AssociatedProvenance(['RelevantProvenanceResources']), store)).toEqual([]);
  });

  it('noteChunk reads ids from text and bytes, parsing lines whose start differs', async () => {
    const associated = new AssociatedProvenance(['RelevantProvenanceResources']);
    const lines = [
      '{"resourceType":"Observation","id":"o1","status":"final"}',
      '{"id":"o2","resourceType":"Observation"}',
      '{"resourceType":"Observation","id":"o3"}',
    ];
    associated.noteChunk('Observation', `${lines.join('\n')}\n`);
    associated.noteChunk('Observation', Buffer.from(`${lines.join('\n').replace(/o(\d)/g, 'x$1')}`));
    expect(associated.exportedCount).toBe(6);
    const candidates = [
      provenance('a', '2024-01-01T00:00:00Z', 'Observation/x2'),
      provenance('b', '2024-01-01T00:00:00Z', 'Observation/o3'),
      provenance('c', '2024-01-01T00:00:00Z', 'Observation/o'),
    ];
    expect(await ids(associated, candidates)).toEqual(['a', 'b']);
  });
});
