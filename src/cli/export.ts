import { createReadStream, createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { CliError, EXIT, UsageError } from './cli-error.js';
import { progressBar } from './progress.js';
import {
  answerError,
  connectionOf,
  fetchOrFail,
  ServerClient,
  UnreachableError,
  type ConnectionFlags,
} from './server-client.js';

export interface ExportFlags extends ConnectionFlags {
  /** Patient-level export (`Patient/$export`). */
  patient?: boolean;
  /** Group-level export of this Group id. */
  group?: string;
  /** `_type`: resource types (several flags and comma lists merge). */
  type?: string[];
  /** `_since`: a FHIR instant. */
  since?: string;
  /** `_typeFilter` (repeatable). */
  typeFilter?: string[];
  /** `_outputFormat`. */
  outputFormat?: string;
  /** The output directory. */
  out: string;
  /** Forget an unfinished export recorded in the output directory and kick off a new one. */
  restart?: boolean;
  /** Keep the job on the server after a complete download (no `DELETE` of the status URL). */
  keep?: boolean;
  quiet?: boolean;
  /** Milliseconds between progress lines when stderr is not a terminal. */
  progressInterval?: number;
}

interface ManifestEntry {
  type?: string;
  url: string;
  count?: number;
}

interface Manifest {
  transactionTime?: string;
  requiresAccessToken?: boolean;
  output?: ManifestEntry[];
  error?: ManifestEntry[];
  deleted?: ManifestEntry[];
}

/** What the output directory remembers of an unfinished export, so running again resumes it. */
interface ExportState {
  kickoffUrl: string;
  statusUrl: string;
}

const STATE_FILE = '.export-state.json';
const MAX_WAIT_MS = 60_000;

/** The kick-off URL (GET, parameters in the query string). */
export function kickoffUrl(fhirBase: string, flags: ExportFlags): string {
  if (flags.patient && flags.group) throw new UsageError('Give --patient or --group, not both');
  const level = flags.group
    ? `/Group/${encodeURIComponent(flags.group)}/$export`
    : flags.patient
      ? '/Patient/$export'
      : '/$export';
  const query = new URLSearchParams();
  const types = (flags.type ?? [])
    .flatMap((t) => t.split(','))
    .map((t) => t.trim())
    .filter(Boolean);
  if (types.length > 0) query.set('_type', types.join(','));
  if (flags.since) query.set('_since', flags.since);
  for (const filter of flags.typeFilter ?? []) query.append('_typeFilter', filter);
  if (flags.outputFormat) query.set('_outputFormat', flags.outputFormat);
  const q = query.toString();
  return `${fhirBase}${level}${q ? `?${q}` : ''}`;
}

/** `Retry-After` (seconds or an HTTP date) in milliseconds, within [100 ms, 60 s]; 1 s when absent. */
export function retryAfterMs(header: string | null, now = Date.now()): number {
  let ms = 1000;
  if (header) {
    const seconds = Number(header);
    const date = Date.parse(header);
    if (Number.isFinite(seconds)) ms = seconds * 1000;
    else if (!Number.isNaN(date)) ms = date - now;
  }
  return Math.min(Math.max(ms, 100), MAX_WAIT_MS);
}

/** Reads `X-Progress` as this server writes it ("N resources written, a of b types done"). */
function parseProgress(text: string): { done: number; total: number } | undefined {
  const match = /(\d+) of (\d+) types? done/.exec(text);
  return match ? { done: Number(match[1]), total: Math.max(Number(match[2]), 1) } : undefined;
}

async function readState(file: string): Promise<ExportState | undefined> {
  try {
    const state = JSON.parse(await fs.readFile(file, 'utf8')) as Partial<ExportState>;
    if (typeof state.kickoffUrl === 'string' && typeof state.statusUrl === 'string') {
      return { kickoffUrl: state.kickoffUrl, statusUrl: state.statusUrl };
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
  }
  throw new CliError(`${file} is not an export state file; remove it or pass --restart`);
}

/** Counts NDJSON lines (a last line without a newline counts; empty lines do not). */
export async function countLines(file: string): Promise<number> {
  let lines = 0;
  let lineHasContent = false;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    for (let i = 0; i < chunk.length; i++) {
      const byte = chunk[i];
      if (byte === 0x0a) {
        if (lineHasContent) lines++;
        lineHasContent = false;
      } else if (byte !== 0x0d && byte !== 0x20) {
        lineHasContent = true;
      }
    }
  }
  return lines + (lineHasContent ? 1 : 0);
}

/** A file name for an entry: the URL's last segment, made safe, unique within the export. */
function fileNameOf(entry: ManifestEntry, index: number, used: Set<string>): string {
  let name = '';
  try {
    name = decodeURIComponent(new URL(entry.url).pathname.split('/').pop() ?? '');
  } catch {
    name = '';
  }
  name = name.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '');
  if (!name) name = `${entry.type ?? 'file'}-${index}.ndjson`;
  while (used.has(name)) name = `${index}-${name}`;
  used.add(name);
  return name;
}

/**
 * Downloads one file to `<file>.part`, continuing a partial one with `Range` (`206` appends, `200`
 * starts over), then renames it to `file`. `onBytes` hears every chunk received.
 */
async function download(
  client: ServerClient,
  url: string,
  file: string,
  withToken: boolean,
  tokenOrigins: Set<string>,
  onBytes: (n: number) => void,
): Promise<void> {
  if (withToken && !tokenOrigins.has(new URL(url).origin)) {
    // The access token goes only where the server already is (the FHIR base, the status URL).
    throw new CliError(`The manifest names ${url}, on another server; the access token is not sent there`);
  }
  const part = `${file}.part`;
  const have = await fs.stat(part).then(
    (s) => s.size,
    () => 0,
  );
  const headers: Record<string, string> = { Accept: 'application/fhir+ndjson' };
  if (have > 0) headers.Range = `bytes=${have}-`;
  const res = withToken ? await client.request(url, { headers }) : await fetchOrFail(url, { headers });
  let append = false;
  if (res.status === 206) {
    const range = /^bytes (\d+)-/.exec(res.headers.get('content-range') ?? '');
    if (!range || Number(range[1]) !== have) {
      throw new CliError(`Download of ${url}: the server answered another range than asked`);
    }
    append = true;
  } else if (res.status === 416 && have > 0) {
    // Nothing after what we hold: the part file is complete.
    await res.body?.cancel();
    await fs.rename(part, file);
    return;
  } else if (res.status !== 200) {
    throw await answerError(`Download of ${url}`, res);
  }
  if (!res.body) throw new CliError(`Download of ${url}: empty answer`);
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      onBytes(chunk.length);
      callback(null, chunk);
    },
  });
  try {
    await pipeline(
      Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>),
      counter,
      createWriteStream(part, { flags: append ? 'a' : 'w' }),
    );
  } catch (error) {
    throw new CliError(
      `Download of ${url} was interrupted (${(error as Error).message}); run the same command again to resume it`,
      EXIT.failure,
      { cause: error },
    );
  }
  await fs.rename(part, file);
}

/**
 * The kick-off request. A server at its limits (`429`, `503` with `Retry-After`: too many exports
 * running, too little disk) is asked again after the time it gives, up to 5 times.
 */
async function kickoff(client: ServerClient, url: string): Promise<Response> {
  for (let attempt = 1; ; attempt++) {
    const res = await client.request(url, {
      headers: { Accept: 'application/fhir+json', Prefer: 'respond-async' },
    });
    const retryAfter = res.headers.get('retry-after');
    if ((res.status !== 429 && res.status !== 503) || retryAfter === null || attempt === 5) return res;
    const wait = retryAfterMs(retryAfter);
    process.stderr.write(`The server is busy (${res.status}); asking again in ${Math.ceil(wait / 1000)} s\n`);
    await res.body?.cancel();
    await sleep(wait);
  }
}

/**
 * A server that stopped answering after the kick-off, said with what to do: the job goes on
 * there, and the output directory remembers it (`.export-state.json`), so the same command
 * resumes it. Other errors as they are.
 */
function resumable(error: unknown, what: string): unknown {
  if (!(error instanceof UnreachableError)) return error;
  return new CliError(
    `${error.message}. The export job goes on on the server; run the same command again to resume ${what}`,
    EXIT.failure,
    { cause: error },
  );
}

/** One downloaded file as the summary shows it. */
export interface ExportedFile {
  kind: 'output' | 'error' | 'deleted';
  type?: string;
  file: string;
  count?: number;
  lines: number;
}

/**
 * `export`: kick-off, polling (honouring `Retry-After`, a progress bar fed by `X-Progress`), then
 * every file of the manifest into `flags.out`, resuming partial files with `Range` and checking each
 * file's line count against the manifest's `count`. The output directory remembers the status URL
 * until the export is complete, so running the same command again resumes it. Throws `CliError`
 * with exit code 3 when a count does not match.
 */
export async function runExport(flags: ExportFlags): Promise<Record<string, unknown>> {
  const { fhirBase, credentials } = connectionOf(flags);
  const client = new ServerClient(fhirBase, credentials);
  const url = kickoffUrl(fhirBase, flags);
  const out = path.resolve(flags.out);
  await fs.mkdir(out, { recursive: true });
  const stateFile = path.join(out, STATE_FILE);
  const progressOptions = {
    quiet: flags.quiet ?? false,
    ...(flags.progressInterval !== undefined ? { lineInterval: flags.progressInterval } : {}),
  };

  let state = flags.restart ? undefined : await readState(stateFile);
  if (state && state.kickoffUrl !== url) {
    throw new CliError(
      `${out} holds an unfinished export of ${state.kickoffUrl}; pass --restart to start ${url} instead, or use another --out`,
    );
  }
  const resumed = Boolean(state);
  if (state) {
    process.stderr.write(`Resuming the export ${state.statusUrl}\n`);
  } else {
    const res = await kickoff(client, url);
    const location = res.headers.get('content-location');
    if (res.status !== 202 || !location) throw await answerError('Export kick-off', res);
    await res.body?.cancel();
    state = { kickoffUrl: url, statusUrl: new URL(location, url).href };
    await fs.writeFile(stateFile, `${JSON.stringify(state, null, 2)}\n`);
  }

  // Poll until the manifest.
  const waiting = progressBar('export  ', progressOptions);
  let manifest: Manifest;
  try {
    for (;;) {
      const res = await client.request(state.statusUrl, { headers: { Accept: 'application/json' } });
      if (res.status === 202) {
        const text = res.headers.get('x-progress') ?? 'in progress';
        const parsed = parseProgress(text);
        waiting.update(parsed?.done ?? 0, parsed?.total ?? 1, text);
        await res.body?.cancel();
        await sleep(retryAfterMs(res.headers.get('retry-after')));
        continue;
      }
      if (res.status === 200) {
        manifest = (await res.json()) as Manifest;
        const total = Math.max(manifest.output?.length ?? 0, 1);
        waiting.update(total, total, 'complete');
        break;
      }
      if (res.status === 404 && resumed) {
        await fs.rm(stateFile, { force: true });
        throw new CliError(
          `The export ${state.statusUrl} is gone (expired or cancelled); run the command again to start a new one`,
        );
      }
      throw await answerError('Export', res);
    }
  } catch (error) {
    throw resumable(error, 'waiting for it');
  } finally {
    waiting.stop();
  }

  // Download every file.
  const entries = [
    ...(manifest.output ?? []).map((e) => ({ kind: 'output' as const, entry: e })),
    ...(manifest.error ?? []).map((e) => ({ kind: 'error' as const, entry: e })),
    ...(manifest.deleted ?? []).map((e) => ({ kind: 'deleted' as const, entry: e })),
  ];
  const used = new Set<string>();
  const origins = new Set([new URL(fhirBase).origin, new URL(state.statusUrl).origin]);
  const files: ExportedFile[] = [];
  const downloading = progressBar('download', progressOptions);
  let bytes = 0;
  const show = (done: number) =>
    downloading.update(done, Math.max(entries.length, 1), `${done}/${entries.length} files, ${bytes} bytes`);
  try {
    show(0);
    for (const [index, { kind, entry }] of entries.entries()) {
      if (typeof entry.url !== 'string') throw new CliError('The manifest has an entry without a url');
      const name = fileNameOf(entry, index, used);
      const file = path.join(out, name);
      // A resumed export keeps the files it finished; a new one replaces whatever is there.
      const complete =
        resumed &&
        (await fs.stat(file).then(
          () => true,
          () => false,
        ));
      if (!resumed) await fs.rm(`${file}.part`, { force: true });
      if (!complete) {
        await download(client, entry.url, file, manifest.requiresAccessToken !== false, origins, (n) => {
          bytes += n;
        });
      }
      files.push({
        kind,
        ...(entry.type ? { type: entry.type } : {}),
        file: name,
        ...(typeof entry.count === 'number' ? { count: entry.count } : {}),
        lines: await countLines(file),
      });
      show(index + 1);
    }
  } catch (error) {
    throw resumable(error, 'downloading its files');
  } finally {
    downloading.stop();
  }

  await fs.writeFile(path.join(out, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  await fs.rm(stateFile, { force: true });
  const mismatches = files.filter((f) => f.count !== undefined && f.count !== f.lines);
  const summary = {
    statusUrl: state.statusUrl,
    transactionTime: manifest.transactionTime,
    directory: out,
    resources: files.filter((f) => f.kind === 'output').reduce((sum, f) => sum + f.lines, 0),
    files,
  };
  if (mismatches.length > 0) {
    process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
    throw new CliError(
      `Line counts differ from the manifest: ${mismatches
        .map((f) => `${f.file} has ${f.lines} lines, the manifest says ${f.count}`)
        .join('; ')}`,
      EXIT.check,
    );
  }
  if (!flags.keep) {
    // Bulk Data: a client may delete the job once it has the files, so the server can free them.
    await client
      .request(state.statusUrl, { method: 'DELETE' })
      .then((res) => res.body?.cancel())
      .catch(() => undefined);
  }
  return summary;
}
