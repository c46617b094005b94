import type { NdjsonChunk, StoredResource } from '../storage/types.js';
import type { AssociatedData } from './kickoff-params.js';
import { chunkText, ndjsonLines } from './ndjson-lines.js';

// `Type/id`, relative or absolute, optionally versioned. Contained (`#x`) and `urn:` references
// never match: they cannot name an exported resource.
const REFERENCE =
  /(?:^|\/)([A-Z][A-Za-z]{1,63})\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[A-Za-z0-9\-.]{1,64})?$/;

/** `Type/id` of a literal reference (`Observation/1`, `https://x/fhir/Observation/1/_history/2`). */
export function referenceKey(reference: string): string | undefined {
  const match = REFERENCE.exec(reference);
  return match ? `${match[1]}/${match[2]}` : undefined;
}

/** The start of a stored resource's JSON line up to its id (the stores write these keys first). */
function idPrefix(resourceType: string): string {
  return `{"resourceType":${JSON.stringify(resourceType)},"id":"`;
}

/** The id of the resource on `text[start, end)`, read from its prefix or else parsed. */
function idOfLine(text: string, start: number, end: number, prefix: string): string {
  if (text.startsWith(prefix, start)) {
    const from = start + prefix.length;
    const close = text.indexOf('"', from);
    if (close > from && close < end && !text.slice(from, close).includes('\\'))
      return text.slice(from, close);
  }
  return (JSON.parse(text.slice(start, end)) as { id: string }).id;
}

function recordedAt(provenance: StoredResource): number {
  const at = typeof provenance.recorded === 'string' ? Date.parse(provenance.recorded) : NaN;
  return Number.isNaN(at) ? -Infinity : at;
}

/**
 * Bulk Data 2.0.0 `includeAssociatedData` (CodeSystem `include-associated-data`): the Provenance
 * resources associated with the exported resources, i.e. whose `target` references one of them.
 * `RelevantProvenanceResources`: all of them. `LatestProvenanceResources`: for each exported
 * resource, the one with the latest `recorded` (ties: the greatest id). When both are asked for,
 * Relevant applies (the IG: "the least restrictive value").
 *
 * Feed it every exported resource (`note`, `noteChunk`), then `select` reads the Provenance of
 * the snapshot: once for Relevant, twice for Latest (first to find the latest per resource, then
 * to copy them), so that memory holds references and ids, never Provenance resources.
 * Memory: the ids of every exported resource other than Provenance (Sets by type).
 */
export class AssociatedProvenance {
  readonly latestOnly: boolean;
  /** Ids of every exported resource other than Provenance, by type. */
  readonly #exported = new Map<string, Set<string>>();
  /** Provenance already in the export's own output (`_type` included Provenance). */
  readonly #written = new Set<string>();
  readonly #prefixes = new Map<string, { text: string; bytes: Buffer }>();

  constructor(values: readonly AssociatedData[]) {
    this.latestOnly = !values.includes('RelevantProvenanceResources');
  }

  /** Number of exported resources recorded (Provenance aside). */
  get exportedCount(): number {
    let count = 0;
    for (const ids of this.#exported.values()) count += ids.size;
    return count;
  }

  /** The set `note` adds ids of `resourceType` to. */
  #idsOf(resourceType: string): Set<string> {
    if (resourceType === 'Provenance') return this.#written;
    let ids = this.#exported.get(resourceType);
    if (!ids) {
      ids = new Set();
      this.#exported.set(resourceType, ids);
    }
    return ids;
  }

  /** Records one exported resource. */
  note(resourceType: string, id: string): void {
    this.#idsOf(resourceType).add(id);
  }

  /**
   * Records every resource of an NDJSON chunk copied as is. The id is read from the line's start
   * (`{"resourceType":"…","id":"…"`, how the stores write it) without parsing; other lines are parsed.
   */
  noteChunk(resourceType: string, data: string | Uint8Array): void {
    const ids = this.#idsOf(resourceType);
    let prefix = this.#prefixes.get(resourceType);
    if (!prefix) {
      const text = idPrefix(resourceType);
      prefix = { text, bytes: Buffer.from(text) };
      this.#prefixes.set(resourceType, prefix);
    }
    if (typeof data === 'string') {
      let start = 0;
      while (start < data.length) {
        let end = data.indexOf('\n', start);
        if (end < 0) end = data.length;
        if (end > start) ids.add(idOfLine(data, start, end, prefix.text));
        start = end + 1;
      }
      return;
    }
    const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
    const p = prefix.bytes;
    let start = 0;
    while (start < buf.length) {
      let end = buf.indexOf(0x0a, start);
      if (end < 0) end = buf.length;
      if (end > start) {
        const from = start + p.length;
        let id: string | undefined;
        if (end > from && buf.compare(p, 0, p.length, start, from) === 0) {
          // Stored ids are [A-Za-z0-9-.]{1,64}: anything else (an escape, non-ASCII) is parsed.
          let close = from;
          const limit = Math.min(end, from + 65);
          while (close < limit) {
            const c = buf[close]!;
            if (c === 0x22 || c === 0x5c || c >= 0x80) break;
            close += 1;
          }
          if (close > from && close < limit && buf[close] === 0x22) id = buf.toString('latin1', from, close);
        }
        ids.add(id ?? (JSON.parse(buf.toString('utf8', start, end)) as { id: string }).id);
      }
      start = end + 1;
    }
  }

  /** True when `provenance` targets at least one exported resource. */
  #targetsExported(provenance: StoredResource): boolean {
    return this.#exportedTargets(provenance).length > 0;
  }

  #exportedTargets(provenance: StoredResource): string[] {
    const targets = Array.isArray(provenance.target) ? (provenance.target as unknown[]) : [];
    const keys: string[] = [];
    for (const target of targets) {
      const reference = (target as { reference?: unknown } | null)?.reference;
      if (typeof reference !== 'string') continue;
      const match = REFERENCE.exec(reference);
      if (!match || !this.#exported.get(match[1]!)?.has(match[2]!)) continue;
      const key = `${match[1]}/${match[2]}`;
      if (!keys.includes(key)) keys.push(key);
    }
    return keys;
  }

  /**
   * The Provenance to add to the export, read from `read()` (every Provenance of the snapshot),
   * leaving out those already written. Yields each line as read, and the parsed resource.
   */
  async *select(
    read: () => AsyncIterable<NdjsonChunk>,
    checkAborted: () => void = () => undefined,
  ): AsyncGenerator<{ line: string; resource: StoredResource }> {
    if (this.exportedCount === 0) return;
    let chosen: Set<string> | undefined;
    if (this.latestOnly) {
      const best = new Map<string, { id: string; at: number }>();
      for await (const chunk of read()) {
        checkAborted();
        for (const line of ndjsonLines(chunkText(chunk.data))) {
          const provenance = JSON.parse(line) as StoredResource;
          const at = recordedAt(provenance);
          for (const key of this.#exportedTargets(provenance)) {
            const current = best.get(key);
            if (!current || at > current.at || (at === current.at && provenance.id > current.id)) {
              best.set(key, { id: provenance.id, at });
            }
          }
        }
      }
      chosen = new Set<string>();
      for (const { id } of best.values()) chosen.add(id);
      if (chosen.size === 0) return;
    }
    const prefix = idPrefix('Provenance');
    for await (const chunk of read()) {
      checkAborted();
      for (const line of ndjsonLines(chunkText(chunk.data))) {
        if (chosen) {
          const id = idOfLine(line, 0, line.length, prefix);
          if (!chosen.has(id) || this.#written.has(id)) continue;
          yield { line, resource: JSON.parse(line) as StoredResource };
          continue;
        }
        const provenance = JSON.parse(line) as StoredResource;
        if (this.#written.has(provenance.id) || !this.#targetsExported(provenance)) continue;
        yield { line, resource: provenance };
      }
    }
  }
}
