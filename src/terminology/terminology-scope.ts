import type { FhirResource } from '../storage/types.js';
import { indexCodeSystem, type CodeSystemIndex } from './code-system-index.js';
import type { LruCache } from './lru-cache.js';
import { r4Entry, type R4Definitions } from './r4-definitions.js';
import type { TerminologySource } from './terminology-types.js';
import { splitCanonical } from './version-order.js';

/**
 * What expansion and the other operations read, synchronously: a code system's index or a value
 * set's definition by `url` (and `version`).
 */
export interface TerminologyResolver {
  codeSystem(url: string, version?: string): CodeSystemIndex | undefined;
  valueSet(url: string, version?: string): FhirResource | undefined;
}

/** The R4 definitions alone. */
export function r4Resolver(r4: R4Definitions): TerminologyResolver {
  return {
    codeSystem: (url, version) => r4Entry(r4.codeSystems, url, version),
    valueSet: (url, version) => r4Entry(r4.valueSets, url, version),
  };
}

/**
 * A project's view for one operation: its own resources, read ahead from its source (reading is
 * asynchronous, expansion is not), in front of the R4 ones (a project resource wins for its url).
 * `dependencies` names every project resource read, with its `versionId`: the key under which an
 * expansion can be cached, so that updating any of them is seen.
 */
export class TerminologyScope implements TerminologyResolver {
  private readonly codeSystems = new Map<string, CodeSystemIndex | null>();
  private readonly valueSets = new Map<string, FhirResource | null>();
  private readonly referencesRead = new Set<string>();
  readonly dependencies: string[] = [];

  constructor(
    private readonly r4: R4Definitions,
    private readonly source: TerminologySource | undefined,
    /** Project code-system indexes, by project, url, version and versionId. */
    private readonly indexes: LruCache<string, CodeSystemIndex>,
  ) {}

  codeSystem(url: string, version?: string): CodeSystemIndex | undefined {
    return this.codeSystems.get(keyOf(url, version)) ?? r4Entry(this.r4.codeSystems, url, version);
  }

  valueSet(url: string, version?: string): FhirResource | undefined {
    return this.valueSets.get(keyOf(url, version)) ?? r4Entry(this.r4.valueSets, url, version);
  }

  /** Reads the project's code system `url` (at `version`) ahead, when the project has one. */
  async loadCodeSystem(url: string, version?: string): Promise<CodeSystemIndex | undefined> {
    const key = keyOf(url, version);
    if (!this.source || this.codeSystems.has(key)) return this.codeSystem(url, version);
    const resource = await this.source.find('CodeSystem', url, version);
    this.codeSystems.set(key, resource ? this.indexOf(resource) : null);
    if (resource) this.depend(resource);
    return this.codeSystem(url, version);
  }

  /** Reads the project's value set `url` ahead, then everything its compose refers to. */
  async loadValueSet(url: string, version?: string): Promise<FhirResource | undefined> {
    const key = keyOf(url, version);
    if (this.source && !this.valueSets.has(key)) {
      const resource = await this.source.find('ValueSet', url, version);
      this.valueSets.set(key, resource ?? null);
      if (resource) this.depend(resource);
    }
    const found = this.valueSet(url, version);
    // Each value set's references are read once: a cycle stops here, and expansion reports it.
    if (found && !this.referencesRead.has(key)) {
      this.referencesRead.add(key);
      await this.loadReferences(found);
    }
    return found;
  }

  /** Reads ahead what `valueSet`'s compose refers to (code systems, nested value sets). */
  async loadReferences(valueSet: FhirResource): Promise<void> {
    for (const part of composeParts(valueSet)) {
      if (typeof part.system === 'string') await this.loadCodeSystem(part.system, stringOr(part.version));
      for (const reference of part.valueSet ?? []) {
        const { url, version } = splitCanonical(reference);
        await this.loadValueSet(url, version);
      }
    }
  }

  private indexOf(resource: FhirResource): CodeSystemIndex {
    const key = [
      this.source?.key,
      resource.url,
      resource.version,
      resource.id,
      resource.meta?.versionId,
    ].join('|');
    const cached = this.indexes.get(key);
    if (cached) return cached;
    const index = indexCodeSystem(resource);
    this.indexes.set(key, index);
    return index;
  }

  private depend(resource: FhirResource): void {
    this.dependencies.push(
      [resource.resourceType, resource.id, resource.version, resource.meta?.versionId].join('/'),
    );
  }
}

/** One `compose.include` or `compose.exclude` entry. */
export interface ComposePart {
  system?: string;
  version?: string;
  concept?: { code?: string; display?: string; designation?: unknown[] }[];
  filter?: { property?: string; op?: string; value?: string }[];
  valueSet?: string[];
}

/** Every include and exclude of `valueSet`'s compose. */
export function composeParts(valueSet: FhirResource): ComposePart[] {
  const compose = valueSet.compose as { include?: ComposePart[]; exclude?: ComposePart[] } | undefined;
  return [...(compose?.include ?? []), ...(compose?.exclude ?? [])];
}

function keyOf(url: string, version: string | undefined): string {
  return version === undefined ? url : `${url}|${version}`;
}

function stringOr(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined;
}
