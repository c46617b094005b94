/**
 * What `$import` reads of its source besides the files' lines: each GET with the source's token and
 * retries, and the export manifest (polled while the export runs) turned into the job's inputs.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { operationOutcome } from '../../http/error-rendering.js';
import type { ImportInput } from './import-params.js';
import type { ImportDeps } from './import-run.js';
import type { SourceAuthorizer } from './source-auth.js';
import { SourceFetchError } from './source-fetch.js';

/**
 * A job-level failure: the outcome the status answers, with its HTTP status (`502` when the source
 * failed, `403` when the owner may not load what the source holds).
 */
export class ImportFailed extends Error {
  constructor(
    readonly outcome: Record<string, unknown>,
    readonly status = 502,
  ) {
    super(String((outcome.issue as { details?: { text?: string } }[] | undefined)?.[0]?.details?.text));
  }
}

/** GET with the source's token; transient failures are retried with backoff, a 401 once with a new token. */
export async function fetchWithRetries(
  deps: ImportDeps,
  auth: SourceAuthorizer,
  url: URL,
  accept: string,
  signal: AbortSignal,
): Promise<{ body: AsyncIterable<Buffer>; status: number; headers: Record<string, unknown> }> {
  let renewed = false;
  for (let attempt = 1; ; attempt++) {
    try {
      const header = await auth.header(signal);
      const response = await deps.fetcher.get(
        url,
        { accept, ...(header ? { authorization: header } : {}) },
        signal,
      );
      if (response.status === 401 && !renewed) {
        response.body.resume();
        auth.reset();
        renewed = true;
        attempt--;
        continue;
      }
      if (response.status !== 200 && response.status !== 202) {
        response.body.resume();
        throw new SourceFetchError('status', `${url.href} answered ${response.status}`, {
          status: response.status,
        });
      }
      return {
        body: response.body as AsyncIterable<Buffer>,
        status: response.status,
        headers: response.headers,
      };
    } catch (error) {
      if (
        !(error instanceof SourceFetchError) ||
        !error.transient ||
        attempt >= deps.attempts ||
        signal.aborted
      )
        throw error;
      await sleep(Math.min(30_000, 500 * 2 ** attempt), undefined, { signal, ref: false });
    }
  }
}

/**
 * The inputs of a source manifest: its `output` files, then its `deleted` files. A manifest URL
 * that answers 202 (the export still running) is polled, honouring `Retry-After`, up to `manifestWait`.
 */
export async function readManifest(
  deps: ImportDeps,
  manifestUrl: string,
  auth: SourceAuthorizer,
  signal: AbortSignal,
): Promise<{ inputs: ImportInput[]; transactionTime?: string }> {
  const started = Date.now();
  for (;;) {
    let response;
    try {
      response = await fetchWithRetries(deps, auth, new URL(manifestUrl), 'application/json', signal);
    } catch (error) {
      if (error instanceof SourceFetchError) {
        throw new ImportFailed(
          operationOutcome('error', 'exception', `The manifest could not be read: ${error.message}`),
        );
      }
      throw error;
    }
    if (response.status === 202) {
      for await (const _ of response.body) void _;
      const after = Number(response.headers['retry-after']);
      const wait = Math.min(60_000, Math.max(1000, Number.isFinite(after) ? after * 1000 : 5000));
      if (Date.now() - started + wait > deps.manifestWait) {
        throw new ImportFailed(
          operationOutcome(
            'error',
            'timeout',
            `The source export was not complete within ${deps.manifestWait} ms`,
          ),
        );
      }
      await sleep(wait, undefined, { signal, ref: false });
      continue;
    }
    const manifest = await deps.fetcher
      .json({ status: 200, headers: response.headers as never, body: response.body as never })
      .catch((error: unknown) => {
        throw new ImportFailed(
          operationOutcome(
            'error',
            'invalid',
            `The manifest is not a Bulk Data manifest: ${(error as Error).message}`,
          ),
        );
      });
    return manifestInputs(manifest, deps);
  }
}

/** The files a Bulk Data manifest lists; anything malformed fails the job with a clear outcome. */
function manifestInputs(
  manifest: unknown,
  deps: ImportDeps,
): { inputs: ImportInput[]; transactionTime?: string } {
  const body = manifest as { output?: unknown; deleted?: unknown; transactionTime?: unknown } | null;
  const invalid = (text: string) =>
    new ImportFailed(operationOutcome('error', 'invalid', `The manifest ${text}`));
  if (typeof body !== 'object' || body === null || !Array.isArray(body.output))
    throw invalid('has no output array');
  const inputs: ImportInput[] = [];
  const take = (entries: unknown, kind: ImportInput['kind']) => {
    if (entries === undefined) return;
    if (!Array.isArray(entries)) throw invalid(`'${kind}' is not an array`);
    for (const item of entries as { type?: unknown; url?: unknown }[]) {
      if (typeof item?.type !== 'string' || typeof item.url !== 'string')
        throw invalid(`has an ${kind} entry without type and url`);
      const problem = deps.fetcher.urlProblem(item.url);
      if (problem) throw invalid(`lists ${item.url}, which ${problem}`);
      inputs.push({ type: kind === 'deleted' ? 'Bundle' : item.type, url: item.url, kind });
    }
  };
  take(body.output, 'output');
  take(body.deleted, 'deleted');
  return {
    inputs,
    ...(typeof body.transactionTime === 'string' ? { transactionTime: body.transactionTime } : {}),
  };
}
