import { createReadStream } from 'node:fs';
import { mkdir, open, readdir, rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { PlatformError } from '../errors.js';
import type {
  ExportFileHandle,
  ExportFileRange,
  ExportFileSink,
  ExportFileStore,
  ExportFilesRef,
} from '../storage/types.js';

const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** What a served or written file may be named: no separator, no leading dot. */
const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** True when `id` has the shape of a job id (guards every path built from it). */
export function isJobId(id: string): boolean {
  return JOB_ID.test(id);
}

const REMOVE = { recursive: true, force: true, maxRetries: 3, retryDelay: 50 } as const;

/** Writes the files of one job into `dir` (created on the first file). */
export function directorySink(dir: string): ExportFileSink {
  return {
    async create(name: string): Promise<ExportFileHandle> {
      if (!FILE_NAME.test(name))
        throw new PlatformError('ERR_EXPORT_TASK_INVALID', 'Invalid export file name');
      await mkdir(dir, { recursive: true });
      const part = path.join(dir, `.${name}.part`);
      const handle = await open(part, 'w');
      let closed = false;
      const close = async (): Promise<void> => {
        if (closed) return;
        closed = true;
        await handle.close();
      };
      return {
        async write(data) {
          if (typeof data === 'string') await handle.write(data);
          else await handle.write(data);
        },
        async commit() {
          await close();
          await rename(part, path.join(dir, name));
        },
        async abort() {
          await close().catch(() => undefined);
          await rm(part, { force: true });
        },
      };
    },
  };
}

/**
 * Export files as plain files under `root`, one directory per job (`{root}/{job id}/{name}`), each
 * written under a hidden temporary name (`.{name}.part`) and renamed when complete. The default
 * file store of the bulk router (`exportDir`); workers write into the directory directly.
 */
export class DirectoryExportFiles implements ExportFileStore {
  readonly directory: string;

  constructor(root: string) {
    this.directory = path.resolve(root);
  }

  /** The directory of one job's files. */
  jobDir(jobId: string): string {
    if (!isJobId(jobId)) throw new PlatformError('ERR_EXPORT_JOB_INVALID', 'Invalid job id');
    return path.join(this.directory, jobId);
  }

  #file(ref: ExportFilesRef, name: string): string {
    if (!FILE_NAME.test(name)) throw new PlatformError('ERR_EXPORT_TASK_INVALID', 'Invalid export file name');
    return path.join(this.jobDir(ref.jobId), name);
  }

  sink(ref: ExportFilesRef): ExportFileSink {
    return directorySink(this.jobDir(ref.jobId));
  }

  async size(ref: ExportFilesRef, name: string): Promise<number | undefined> {
    const s = await stat(this.#file(ref, name)).catch(() => undefined);
    return s?.isFile() ? s.size : undefined;
  }

  read(ref: ExportFilesRef, name: string, range?: ExportFileRange): Readable {
    return createReadStream(this.#file(ref, name), range ? { start: range.start, end: range.end } : {});
  }

  async bytes(ref: ExportFilesRef): Promise<number> {
    const dir = this.jobDir(ref.jobId);
    const names = await readdir(dir).catch(() => [] as string[]);
    let total = 0;
    for (const name of names) {
      if (name.startsWith('.')) continue;
      total += await stat(path.join(dir, name)).then(
        (s) => s.size,
        () => 0,
      );
    }
    return total;
  }

  async remove(ref: ExportFilesRef): Promise<void> {
    // Retries: a terminated worker thread may still be closing a file in the directory.
    await rm(this.jobDir(ref.jobId), REMOVE);
  }

  async jobIds(): Promise<string[]> {
    return (await readdir(this.directory).catch(() => [] as string[])).filter(isJobId);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
