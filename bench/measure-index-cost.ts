import { loadSearchRegistry } from '../src/search/definitions.js';
import { createResourceIndexer, loadR4Indexer } from '../src/search/index-resource.js';
import { postingKeys } from '../src/storage/engine/posting-keys.js';
import type { ResourceIndexer } from '../src/storage/search-index.js';
import type { FhirResource } from '../src/storage/types.js';
import { median, now } from './stats.js';
import { readSynthea } from './synthea.js';

/*
 * The per-resource cost of indexing a version for search (issue 30), side by side in one run:
 * the FHIRPath interpreter alone (`createResourceIndexer` without choice types, the starting
 * point) and the R4 indexer with its compiled plain paths (`loadR4Indexer`), each plus the posting
 * keys the memory and file stores keep. Over up to `--per-type` resources of each type of the
 * Synthea sample (the interpreter takes milliseconds a resource); µs per resource, median of
 * `--rounds` passes.
 *   node --import tsx bench/measure-index-cost.ts [--dir d] [--rounds 3] [--per-type 300]
 */

const args = process.argv.slice(2);
const option = (name: string, fallback: string): string => {
  const at = args.indexOf(name);
  return at === -1 ? fallback : args[at + 1]!;
};
const dir = option('--dir', '/work/shared/data/synthea-r4-100');
const rounds = Number(option('--rounds', '3'));
const perType = Number(option('--per-type', '300'));

const byType = new Map<string, FhirResource[]>();
for (const r of readSynthea(dir)) {
  const list = byType.get(r.resourceType) ?? [];
  if (list.length < perType) list.push(r);
  byType.set(r.resourceType, list);
}
const resources = [...byType.values()].flat();
const compiled = await loadR4Indexer();
const interpreted = createResourceIndexer(await loadSearchRegistry(), compiled.fingerprint);

const pass = (indexer: ResourceIndexer): number => {
  const start = now();
  for (const r of resources) postingKeys(indexer.index(r));
  return now() - start;
};
pass(compiled);
pass(interpreted);
const times = { interpreted: [] as number[], compiled: [] as number[] };
for (let i = 0; i < rounds; i++) {
  times.interpreted.push(pass(interpreted));
  times.compiled.push(pass(compiled));
}
const us = (ms: number[]): number => (median(ms) * 1000) / resources.length;
console.log(
  `resources: ${resources.length} (${byType.size} types, up to ${perType} each), rounds: ${rounds}`,
);
console.log(`interpreter + keys: ${us(times.interpreted).toFixed(1)} µs/resource`);
console.log(`compiled + keys:    ${us(times.compiled).toFixed(1)} µs/resource`);
console.log(`speed-up:           ${(us(times.interpreted) / us(times.compiled)).toFixed(1)}x`);
