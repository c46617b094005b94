/**
 * The response Bundle of a batch or transaction: its entries, and its bytes with the stored text of
 * written resources spliced in.
 */
import type { StoredResource, StoredText, WriteResult } from '../../storage/types.js';
import { isResourceType } from '../../common/resource-types.js';
import { outcomeOf } from '../../http/outcome.js';
import { etagOf } from '../versioning.js';

/** A `Bundle` as JSON. */
export interface BundleJson {
  resourceType: 'Bundle';
  id?: string;
  type: string;
  entry?: Record<string, unknown>[];
  [key: string]: unknown;
}

/** What the response entries depend on. */
export interface ResponseOptions {
  /** Absolute URL of the FHIR base, for `fullUrl`s. */
  baseUrl: string;
  /** `Prefer: return=minimal`: no resources in the entries. */
  returnMinimal?: boolean;
  /**
   * `Prefer: return=OperationOutcome`: no resources in the entries, an `informational`
   * OperationOutcome in each `response.outcome` instead.
   */
  returnOutcome?: boolean;
}

/** The response entry of an entry answered with `resource` (a read, a match, a stored object). */
export function responseOf(
  status: string,
  resource: StoredResource | undefined,
  options: ResponseOptions,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  if (!resource) return { response: { status, ...extra } };
  const outcome = options.returnOutcome
    ? { outcome: outcomeOf([{ severity: 'information', code: 'informational', details: { text: status } }]) }
    : {};
  return {
    fullUrl: `${options.baseUrl}/${resource.resourceType}/${resource.id}`,
    ...(options.returnMinimal || options.returnOutcome ? {} : { resource }),
    response: {
      status,
      location: `${resource.resourceType}/${resource.id}/_history/${resource.meta.versionId}`,
      etag: etagOf(resource.meta.versionId),
      lastModified: resource.meta.lastUpdated,
      ...outcome,
      ...extra,
    },
  };
}

/** What a written entry's `fullUrl` and `response` are made of; checked before they are written unescaped. */
const PLAIN_FIELDS = /^[A-Za-z0-9\-.:+]+$/;

/**
 * The response entry of a write whose stored JSON text the store answered: {@link bundleBytes}
 * splices that text in, and writes `fullUrl` and `response` from their parts, without making the
 * objects. `toJSON` gives the same entry as FHIR JSON (the resource parsed from the text) for any
 * other reader.
 */
class WrittenEntry {
  constructor(
    readonly status: string,
    readonly baseUrl: string,
    readonly stored: StoredText,
    private readonly result: WriteResult,
    readonly withResource: boolean,
  ) {}

  /** True when the type, id, version and instant need no JSON escaping (always, from the stores). */
  get plain(): boolean {
    const { resourceType, id, versionId, lastUpdated } = this.stored;
    return (
      isResourceType(resourceType) &&
      PLAIN_FIELDS.test(id) &&
      PLAIN_FIELDS.test(versionId) &&
      PLAIN_FIELDS.test(lastUpdated)
    );
  }

  toJSON(): Record<string, unknown> {
    const options = { baseUrl: this.baseUrl, returnMinimal: !this.withResource };
    return responseOf(this.status, this.result.resource, options);
  }
}

/** The response entry of a write (see {@link WrittenEntry}). */
export function writeResponseOf(
  status: string,
  result: WriteResult,
  options: ResponseOptions,
): Record<string, unknown> {
  const { stored } = result;
  if (!stored || options.returnOutcome) return responseOf(status, result.resource, options);
  const entry = new WrittenEntry(status, options.baseUrl, stored, result, !options.returnMinimal);
  return entry as unknown as Record<string, unknown>;
}

/**
 * The response Bundle as UTF-8 JSON: entries written from stored text get that text spliced in
 * (`"resource":<stored JSON>`) instead of a parse and a `JSON.stringify` of the resource. The
 * pieces are encoded straight into one buffer (no joined copy of the whole text first); a piece
 * whose UTF-8 length is known (the parts of a plain entry, a stored text the store measured) is not
 * measured again, and one of as many bytes as characters is copied as Latin-1.
 */
export function bundleBytes(bundle: BundleJson): Buffer {
  const { entry, ...head } = bundle;
  const headText = JSON.stringify(head);
  const parts: string[] = [`${headText.slice(0, -1)}${headText.length > 2 ? ',' : ''}"entry":[`];
  /** UTF-8 bytes of each part, aligned with `parts`; -1 when not known yet. */
  const sizes: number[] = [-1];
  let separator = '';
  let base: { url: string; json: string; ascii: boolean } | undefined;
  for (const e of entry ?? []) {
    if (e instanceof WrittenEntry && e.plain) {
      // `"<base>/` escaped (and measured) once for all the entries of one base.
      if (base?.url !== e.baseUrl) {
        const json = JSON.stringify(`${e.baseUrl}/`).slice(0, -1);
        base = { url: e.baseUrl, json, ascii: Buffer.byteLength(json) === json.length };
      }
      const { resourceType, id, versionId, lastUpdated, json, bytes } = e.stored;
      const path = `${resourceType}/${id}`;
      const head = `${separator}{"fullUrl":${base.json}${path}"${e.withResource ? ',"resource":' : ''}`;
      parts.push(head);
      // Plain fields are ASCII: the only other characters can come from the base URL.
      sizes.push(base.ascii ? head.length : -1);
      if (e.withResource) {
        parts.push(json);
        sizes.push(bytes ?? -1);
      }
      const tail =
        `,"response":{"status":"${e.status}","location":"${path}/_history/${versionId}",` +
        `"etag":${JSON.stringify(etagOf(versionId))},"lastModified":"${lastUpdated}"}}`;
      parts.push(tail);
      sizes.push(tail.length);
    } else {
      parts.push(`${separator}${JSON.stringify(e)}`);
      sizes.push(-1);
    }
    separator = ',';
  }
  parts.push(']}');
  sizes.push(2);
  let length = 0;
  for (let i = 0; i < parts.length; i++) {
    if (sizes[i]! < 0) sizes[i] = Buffer.byteLength(parts[i]!);
    length += sizes[i]!;
  }
  const bytes = Buffer.allocUnsafe(length);
  let at = 0;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    const size = sizes[i]!;
    if (size === part.length) bytes.write(part, at, size, 'latin1');
    else bytes.write(part, at, size, 'utf8');
    at += size;
  }
  return bytes;
}
