/**
 * The servers a project's `$import` pulls from, as `Project/{id}/$settings` registers them
 * (`importSource` parameters) and the `Project` resource shows them (the private key never shown).
 * The platform signs in to each as a SMART Backend Services client (client credentials with a
 * signed JWT assertion). See docs/project-init.md.
 */
import type { ProjectImportSource } from '../storage/types.js';
import { invalidParameter, type ParameterParts } from '../http/fhir-parameters.js';
import { readPrivateJwk, remoteUrlProblem } from './remote-server-checks.js';
import { isPublicHostname } from '../auth/keys/public-address.js';

/** The parts of one `importSource`. */
const IMPORT_SOURCE_PARTS = {
  url: { type: ['uri', 'url'], required: true },
  tokenUrl: { type: ['uri', 'url'], required: true },
  clientId: { type: ['string', 'id'], required: true },
  privateKey: { type: 'string', required: true },
  scope: { type: 'string' },
} as const;

/** The `$settings` parameter of the import sources: repeated, one per source. */
export const IMPORT_SOURCE_PARAMETERS = {
  importSource: { parts: IMPORT_SOURCE_PARTS, repeats: true },
} as const;

/** The `reset` value that removes every import source. */
export const IMPORT_SOURCES_RESET = 'importSources';

/** Most sources a project may register: a setting, not a data set. */
export const MAX_IMPORT_SOURCES = 20;

type ImportSourceItem = ParameterParts<typeof IMPORT_SOURCE_PARTS>;

/** One source read from `$settings`, with where it was given (for a later 400). */
export interface ImportSourceChange {
  source: ProjectImportSource;
  /** FHIRPath of its `importSource` parameter (`Parameters.parameter[2]`). */
  expression: string;
}

/** A base URL as stored: origin and path, without trailing slashes. */
function baseUrl(text: string): string {
  const url = new URL(text);
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

/** What the project router allows of import sources. */
export interface ImportSourceRules {
  /** URLs may name a loopback, private or link-local address (or `localhost`). */
  allowPrivateAddresses: boolean;
}

/** Why a source URL is refused by the address rule, or undefined. */
function addressProblem(text: string, rules: ImportSourceRules): string | undefined {
  if (rules.allowPrivateAddresses || isPublicHostname(new URL(text).hostname)) return undefined;
  return 'names a loopback, private or link-local address, which this server does not pull from';
}

/** One source, checked (400 at the part at fault). */
function readSource(item: ImportSourceItem, rules: ImportSourceRules): ProjectImportSource {
  const { url, tokenUrl, clientId, privateKey, scope } = item.parts;
  const urlProblem = remoteUrlProblem(url.value) ?? addressProblem(url.value, rules);
  if (urlProblem) throw invalidParameter(url.expression, `'importSource' url ${urlProblem}`);
  const tokenProblem =
    remoteUrlProblem(tokenUrl.value, { query: true }) ?? addressProblem(tokenUrl.value, rules);
  if (tokenProblem) throw invalidParameter(tokenUrl.expression, `'importSource' tokenUrl ${tokenProblem}`);
  const scopes = scope?.value.split(/\s+/).filter(Boolean);
  return {
    url: baseUrl(url.value),
    tokenUrl: tokenUrl.value,
    clientId: clientId.value,
    privateKey: readPrivateJwk(privateKey, 'importSource privateKey'),
    ...(scopes ? { scope: scopes.join(' ') } : {}),
  };
}

/**
 * The sources among read `$settings` parameters (empty when none is given). 400 for a bad part, for
 * one `url` given twice, and for more than {@link MAX_IMPORT_SOURCES}.
 */
export function readImportSources(
  items: ImportSourceItem[],
  rules: ImportSourceRules = { allowPrivateAddresses: true },
): ImportSourceChange[] {
  if (items.length > MAX_IMPORT_SOURCES) {
    throw invalidParameter(
      items[MAX_IMPORT_SOURCES]!.expression,
      `A project holds at most ${MAX_IMPORT_SOURCES} import sources`,
    );
  }
  const seen = new Set<string>();
  return items.map((item) => {
    const source = readSource(item, rules);
    if (seen.has(source.url)) {
      throw invalidParameter(item.parts.url.expression, `The import source '${source.url}' is given twice`);
    }
    seen.add(source.url);
    return { source, expression: item.expression };
  });
}

/**
 * The stored sources with `changes` applied: a source with the `url` of a stored one replaces it
 * (in its place), others are added. 400 at the first added one past {@link MAX_IMPORT_SOURCES}.
 */
export function applyImportSources(
  current: readonly ProjectImportSource[] | undefined,
  changes: readonly ImportSourceChange[],
): ProjectImportSource[] | undefined {
  if (changes.length === 0) return current ? [...current] : undefined;
  const next = [...(current ?? [])];
  for (const { source, expression } of changes) {
    const at = next.findIndex((stored) => stored.url === source.url);
    if (at >= 0) {
      next[at] = source;
      continue;
    }
    if (next.length >= MAX_IMPORT_SOURCES) {
      throw invalidParameter(expression, `A project holds at most ${MAX_IMPORT_SOURCES} import sources`);
    }
    next.push(source);
  }
  return next;
}

/** An import source as the `Project` resource shows it: no private key. */
export interface ImportSourceView {
  url: string;
  tokenUrl: string;
  clientId: string;
  /** The `kid` of the private key, when it has one. */
  keyId?: string;
  scope?: string;
}

/** The sources as the `Project` resource shows them. */
export function importSourcesView(sources: readonly ProjectImportSource[]): ImportSourceView[] {
  return sources.map((source) => {
    const kid = source.privateKey.kid;
    return {
      url: source.url,
      tokenUrl: source.tokenUrl,
      clientId: source.clientId,
      ...(typeof kid === 'string' ? { keyId: kid } : {}),
      ...(source.scope !== undefined ? { scope: source.scope } : {}),
    };
  });
}
