import fs from 'node:fs/promises';
import { openAsBlob } from 'node:fs';
import path from 'node:path';
import { CliError, EXIT } from './cli-error.js';
import { progressBar } from './progress.js';
import { answerError, connectionOf, ServerClient, type ConnectionFlags } from './server-client.js';

export interface ImportFlags extends ConnectionFlags {
  quiet?: boolean;
  /** Milliseconds between progress lines when stderr is not a terminal. */
  progressInterval?: number;
}

/** One file's result, from the information issue the server answers for it. */
export interface ImportedFile {
  file: string;
  lines: number;
  loaded: number;
  failed: number;
}

interface Issue {
  severity?: string;
  details?: { text?: string };
  location?: string[];
}

const SHOWN_ERRORS = 100;

/** The NDJSON files named: files as given, directories' `*.ndjson` files (sorted, not recursive). */
export async function ndjsonFiles(paths: string[]): Promise<{ file: string; size: number }[]> {
  const files: { file: string; size: number }[] = [];
  for (const given of paths) {
    const stat = await fs.stat(given).catch(() => {
      throw new CliError(`${given} does not exist`);
    });
    if (stat.isDirectory()) {
      const names = (await fs.readdir(given)).filter((n) => n.endsWith('.ndjson')).sort();
      for (const name of names) {
        const file = path.join(given, name);
        const s = await fs.stat(file);
        if (s.isFile()) files.push({ file, size: s.size });
      }
    } else {
      files.push({ file: given, size: stat.size });
    }
  }
  if (files.length === 0) throw new CliError(`No .ndjson file in ${paths.join(', ')}`);
  return files;
}

/**
 * `import`: each NDJSON file is one `multipart/form-data` upload to the FHIR base (the NDJSON upload
 * of docs/fhir.md), streamed from disk with a progress bar by bytes. Answers the summary: the
 * resources loaded and every line the server refused (its OperationOutcome issues). Throws
 * `CliError` with exit code 3 (after printing the summary) when lines were refused.
 */
export async function runImport(
  paths: string[],
  flags: ImportFlags,
): Promise<{ summary: Record<string, unknown>; failed: number }> {
  const { fhirBase, credentials } = connectionOf(flags);
  const client = new ServerClient(fhirBase, credentials);
  const files = await ndjsonFiles(paths);
  const total = files.reduce((sum, f) => sum + f.size, 0);
  const bar = progressBar('import', {
    quiet: flags.quiet ?? false,
    ...(flags.progressInterval !== undefined ? { lineInterval: flags.progressInterval } : {}),
  });
  const results: ImportedFile[] = [];
  const errors: { location: string; message: string }[] = [];
  let errorCount = 0;
  let sent = 0;
  const show = (text: string) => bar.update(Math.min(sent, total), Math.max(total, 1), text);
  try {
    show(`0/${files.length} files`);
    for (const [index, { file, size }] of files.entries()) {
      const name = path.basename(file);
      const form = new FormData();
      form.append('file', await openAsBlob(file, { type: 'application/fhir+ndjson' }), name);
      // The multipart encoding of the form, streamed (the file is read as it is sent).
      const encoded = new Response(form);
      const start = sent;
      const counter = new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          sent = Math.min(start + size, sent + chunk.byteLength);
          show(`${index}/${files.length} files, ${name}`);
          controller.enqueue(chunk);
        },
      });
      const res = await client.request(fhirBase, {
        method: 'POST',
        headers: {
          'Content-Type': encoded.headers.get('content-type') ?? 'multipart/form-data',
          Accept: 'application/fhir+json',
        },
        body: encoded.body!.pipeThrough(counter),
        duplex: 'half',
      });
      if (res.status !== 200) throw await answerError(`Upload of ${file}`, res);
      const outcome = (await res.json()) as { issue?: Issue[] };
      sent = start + size;
      const issues = outcome.issue ?? [];
      const report = issues.find(
        (i) =>
          i.severity !== 'error' && /(\d+) lines, (\d+) loaded, (\d+) failed/.test(i.details?.text ?? ''),
      );
      const counts = /(\d+) lines, (\d+) loaded, (\d+) failed/.exec(report?.details?.text ?? '');
      results.push({
        file,
        lines: Number(counts?.[1] ?? 0),
        loaded: Number(counts?.[2] ?? 0),
        failed: Number(counts?.[3] ?? 0),
      });
      for (const issue of issues) {
        if (issue.severity !== 'error' && issue.severity !== 'fatal') continue;
        errorCount++;
        if (errors.length < SHOWN_ERRORS) {
          errors.push({ location: issue.location?.[0] ?? name, message: issue.details?.text ?? '' });
        }
      }
      show(`${index + 1}/${files.length} files`);
    }
  } finally {
    bar.stop();
  }
  const failed = results.reduce((sum, r) => sum + r.failed, 0);
  return {
    summary: {
      files: results,
      resources: results.reduce((sum, r) => sum + r.loaded, 0),
      failed,
      errors,
      ...(errorCount > errors.length ? { errorsNotShown: errorCount - errors.length } : {}),
    },
    failed,
  };
}

/** The exit for an import summary: 3 when the server refused lines. */
export function importCheck(failed: number): CliError | undefined {
  return failed > 0
    ? new CliError(`${failed} line(s) were refused by the server (listed in "errors")`, EXIT.check)
    : undefined;
}
