import { StringDecoder } from 'node:string_decoder';
import { errorOutcome, type ErrorLogger } from '../../http/error-rendering.js';
import { FhirError } from '../../http/http-error.js';
import { DEFAULT_MAX_JSON_DEPTH, valueNestingExceeds } from '../../http/json-depth.js';
import type { FhirResource, ResourceWrite } from '../../storage/types.js';
import type { RequestActivity } from '../audit/audit-activity.js';
import { authorize } from '../interactions.js';
import type { FhirContext } from '../context.js';
import type { OutcomeIssue } from '../../http/outcome.js';
import { checkResource, withoutServerMeta } from '../resource-checks.js';
import { fhirErrorOfSearch } from '../search/search-errors.js';

/** Options of {@link loadNdjson}. */
export interface NdjsonLoadOptions {
  /**
   * Most lines written per `storage.writeResources` call (a batch also ends at 8 MiB of line text).
   * While one batch is written, the next is parsed and validated, so at most two are held.
   * @default 2000
   */
  batchSize?: number;
  /** Longest line accepted, in characters; a longer line is reported and skipped. @default 16777216 */
  maxLineLength?: number;
  /**
   * Deepest nesting of objects and arrays accepted in a line; a deeper line is reported and skipped
   * (`fhirRouter` passes its `maxJsonDepth`).
   * @default 100
   */
  maxJsonDepth?: number;
  /** Most error issues reported per file (the count of failed lines stays exact). @default 1000 */
  maxIssues?: number;
  /** Receives the errors of lines that fail with a 5xx status (storage failures). @default writes to stderr */
  onError?: ErrorLogger;
  /**
   * Collects each write applied, for the audit trail (set by the upload handler per request).
   * @default undefined (nothing collected)
   * @internal
   */
  activity?: RequestActivity;
  /**
   * Changes each resource read before it is checked and written (`$import` rewrites the source
   * server's absolute references with it). @default none
   */
  transform?: (resource: FhirResource) => FhirResource;
  /**
   * Read each line as a Bulk Data `deleted` line: a Bundle whose `DELETE` entries (`Type/id`) are
   * applied as deletes (`$import` of an export's `deleted` files). @default false
   */
  deletions?: boolean;
}

/** What {@link loadNdjson} needs of the FHIR context: the store, the project, the writer and its checks. */
export type NdjsonLoadContext = Pick<FhirContext, 'storage' | 'projectId' | 'principal' | 'validate'>;

/** What loading one NDJSON file did. */
export interface NdjsonFileReport {
  /** The file name as uploaded. */
  file: string;
  /** Non-blank lines read. */
  lines: number;
  /** Lines stored. */
  loaded: number;
  /** Lines rejected (each reported in `issues`, up to `maxIssues`). */
  failed: number;
  /** One error issue per rejected line: `location` is `["<file>:<line>"]`. */
  issues: OutcomeIssue[];
}

/** A batch also ends at this much line text (UTF-16 code units), so memory stays bounded for large lines. */
const BATCH_CHARS = 8 * 1024 * 1024;

interface Pending {
  line: number;
  write: ResourceWrite;
}

/**
 * Streams one NDJSON file into the project: one resource per line; a line with an `id` is an update
 * (create-or-replace with that id), one without is a create with a server-assigned id. A bad line (not
 * JSON, not a resource, forbidden type, invalid in a strict project, storage refusal) is reported by
 * file name and line number and does not stop the others. Reads with back-pressure: at most one batch
 * of lines is held at a time, never the file.
 */
export async function loadNdjson(
  ctx: NdjsonLoadContext,
  file: string,
  input: AsyncIterable<Buffer | string>,
  options: NdjsonLoadOptions = {},
): Promise<NdjsonFileReport> {
  const batchSize = Math.max(1, options.batchSize ?? 2000);
  const maxLineLength = options.maxLineLength ?? 16 * 1024 * 1024;
  const maxIssues = options.maxIssues ?? 1000;
  const maxJsonDepth = options.maxJsonDepth ?? DEFAULT_MAX_JSON_DEPTH;
  const report: NdjsonFileReport = { file, lines: 0, loaded: 0, failed: 0, issues: [] };
  let pending: Pending[] = [];
  let pendingChars = 0;
  /** The batch being written while the next one is read (at most one at a time). */
  let writing: Promise<void> = Promise.resolve();

  const fail = (line: number, error: unknown): void => {
    report.failed++;
    if (report.issues.length >= maxIssues) return;
    const { outcome } = errorOutcome(fhirErrorOfSearch(error), options.onError);
    const first = outcome.issue[0]!;
    report.issues.push({
      severity: 'error',
      code: first.code,
      details: { text: `${file} line ${line}: ${first.details?.text ?? 'rejected'}` },
      ...(first.expression ? { expression: first.expression } : {}),
      location: [`${file}:${line}`],
    });
  };

  const { activity } = options;
  const write = async (batch: Pending[]): Promise<void> => {
    try {
      const results = await ctx.storage.writeResources(
        ctx.projectId,
        batch.map((p) => p.write),
      );
      report.loaded += batch.length;
      if (activity) batch.forEach((p, i) => activity.wrote(p.write, results[i]));
    } catch {
      // One bad write fails the whole batch: redo it line by line to find and report the culprit(s).
      for (const p of batch) {
        try {
          const [result] = await ctx.storage.writeResources(ctx.projectId, [p.write]);
          report.loaded++;
          activity?.wrote(p.write, result);
        } catch (error) {
          fail(p.line, error);
        }
      }
    }
  };

  /** Hands the pending lines to the writer once the previous batch is written; `wait` also awaits this one. */
  const flush = async (wait: boolean): Promise<void> => {
    await writing;
    if (pending.length > 0) {
      const batch = pending;
      pending = [];
      pendingChars = 0;
      writing = write(batch);
    }
    if (wait) await writing;
  };

  const handle = async (text: string, line: number): Promise<void> => {
    const trimmed = text.endsWith('\r') ? text.slice(0, -1) : text;
    if (trimmed.trim() === '') return;
    report.lines++;
    try {
      // A long line that arrived whole within one chunk: the carry check below only sees lines
      // still open at a chunk's end.
      if (trimmed.length > maxLineLength) {
        throw new FhirError(413, 'too-costly', `The line is longer than ${maxLineLength} characters`);
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(trimmed);
      } catch {
        throw new FhirError(400, 'structure', 'The line is not valid JSON');
      }
      if (valueNestingExceeds(parsed, maxJsonDepth)) {
        throw new FhirError(400, 'structure', `The line nests JSON deeper than ${maxJsonDepth} levels`);
      }
      if (options.deletions) {
        for (const write of deletionsOf(parsed)) {
          authorize(ctx, write.resourceType, 'delete');
          pending.push({ line, write });
        }
      } else {
        const checked = checkResource(parsed);
        const resource = withoutServerMeta(options.transform ? options.transform(checked) : checked);
        const write: ResourceWrite =
          resource.id === undefined
            ? { op: 'create', resource }
            : { op: 'update', resource: resource as FhirResource & { id: string } };
        authorize(ctx, resource.resourceType, write.op);
        await ctx.validate(resource);
        pending.push({ line, write });
      }
      pendingChars += trimmed.length;
    } catch (error) {
      fail(line, error);
    }
    if (pending.length >= batchSize || pendingChars >= BATCH_CHARS) await flush(false);
  };

  // Split by hand rather than with a line-splitting stream: we need exact line numbers, a per-line
  // length limit that reports and skips the line (not an error that ends the file), and pull-based
  // reading so storage writes apply back-pressure to the upload.
  const decoder = new StringDecoder('utf8');
  let carry = '';
  let lineNumber = 0;
  let skipping = false;
  const consume = async (text: string, final: boolean): Promise<void> => {
    let start = 0;
    for (;;) {
      const newline = text.indexOf('\n', start);
      if (newline === -1) break;
      lineNumber++;
      if (skipping) skipping = false;
      else await handle(text.slice(start, newline), lineNumber);
      start = newline + 1;
    }
    carry = text.slice(start);
    if (final) {
      if (carry !== '' && !skipping) await handle(carry, ++lineNumber);
      carry = '';
    } else if (carry.length > maxLineLength) {
      if (!skipping) {
        report.lines++;
        fail(
          lineNumber + 1,
          new FhirError(413, 'too-costly', `The line is longer than ${maxLineLength} characters`),
        );
      }
      skipping = true;
      carry = '';
    }
  };
  try {
    for await (const chunk of input) {
      await consume(carry + (typeof chunk === 'string' ? chunk : decoder.write(chunk)), false);
    }
    await consume(carry + decoder.end(), true);
  } finally {
    // Whatever ends the reading, the batch in flight settles before the report (or the error) goes out.
    await flush(true);
  }
  return report;
}

const DELETE_URL = /^([A-Z][A-Za-z]+)\/([A-Za-z0-9\-.]{1,64})$/;

/**
 * The deletes of a Bulk Data `deleted` line: a Bundle whose entries each have `request.method`
 * `DELETE` and `request.url` `Type/id` (Bulk Data 2.0.0, "deleted" files). Anything else is a 400.
 */
function deletionsOf(parsed: unknown): Extract<ResourceWrite, { op: 'delete' }>[] {
  const bundle = parsed as { resourceType?: unknown; entry?: unknown } | null;
  if (typeof bundle !== 'object' || bundle === null || bundle.resourceType !== 'Bundle') {
    throw new FhirError(400, 'structure', 'A deleted line must be a Bundle');
  }
  const entries = Array.isArray(bundle.entry) ? (bundle.entry as unknown[]) : [];
  return entries.map((entry, i) => {
    const request = (entry as { request?: { method?: unknown; url?: unknown } } | null)?.request;
    const match = typeof request?.url === 'string' ? DELETE_URL.exec(request.url) : null;
    if (request?.method !== 'DELETE' || !match) {
      throw new FhirError(400, 'structure', `Bundle.entry[${i}] must be a DELETE of Type/id`);
    }
    return { op: 'delete', resourceType: match[1]!, id: match[2]! };
  });
}
