// Faults inside the export worker threads (the real piscina pool): the worker's file writes fail
// with ENOSPC or EIO (part of the data written), its reads fail with EIO, or the thread dies in the
// middle of a write. The faults are switched on and off through a file both threads see (the
// fixtures `faulty-export-files.mjs` and `ndjson-dir-reader.mjs`). Each time: the job ends failed
// with an OperationOutcome at its status URL, no file of it is left or served, and the same pool
// runs the next export once the fault clears.
import fs from 'node:fs';
import path from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { DirectoryExportFiles } from '../../src/bulk/directory-export-files.js';
import type { StorageDescriptor } from '../../src/storage/types.js';
import { bulkTestApp, download, kickoff, poll, tempDir, type Manifest } from '../helpers/bulk-export.js';
import { expectOperationOutcome } from '../helpers/protocol-errors.js';
import { fixtureStorage } from './fixtures/fixture-storage.js';

const FAULTY_FILES_MODULE = new URL('./fixtures/faulty-export-files.mjs', import.meta.url).href;

/** Plain files under `root`, written in the worker by the faulty fixture store. */
class FaultyWorkerFiles extends DirectoryExportFiles {
  readonly descriptor: StorageDescriptor;
  constructor(root: string, faultFile: string) {
    super(root);
    this.descriptor = {
      module: FAULTY_FILES_MODULE,
      exportName: 'faultyExportFiles',
      options: { root, faultFile },
    };
  }
  /** Files of every job, hidden parts included. */
  all(): string[] {
    return fs
      .readdirSync(this.directory)
      .flatMap((job) => fs.readdirSync(path.join(this.directory, job)).map((f) => `${job}/${f}`));
  }
}

async function setup() {
  const faultFile = path.join(tempDir('fault-'), 'fault.json');
  const files = new FaultyWorkerFiles(tempDir('bulk-out-'), faultFile);
  const storage = fixtureStorage({ dir: tempDir(), faultFile });
  const t = await bulkTestApp({ storage, exportFiles: files, maxFileSize: 1024 * 1024 });
  const fault = (value: Record<string, unknown> | undefined) => {
    if (value) fs.writeFileSync(faultFile, JSON.stringify(value));
    else fs.rmSync(faultFile, { force: true });
  };
  return { ...t, files, fault };
}

describe('faults in export worker threads', () => {
  it.each([
    ['ENOSPC', { write: 'ENOSPC', afterBytes: 100 }, 'transient'],
    ['EIO', { write: 'EIO', afterBytes: 100 }, 'transient'],
    ['an EIO read', { read: 'EIO' }, 'transient'],
    ['the thread exiting mid-write', { write: 'exit', afterBytes: 100 }, 'exception'],
  ] as const)(
    '%s: the job fails with an OperationOutcome, no file is left, the pool serves the next export',
    async (_name, fault, code) => {
      const { app, auth, files, fault: setFault } = await setup();
      setFault(fault);
      const failedPath = await kickoff(app, auth, '/$export?_type=Patient,Observation');
      const failed = await poll(app, auth, failedPath);
      expectOperationOutcome(failed, 500, code);
      expect(files.all()).toEqual([]);
      // Asked again: the same failure, still nothing to download.
      expectOperationOutcome(await request(app).get(failedPath).set('Authorization', auth), 500, code);

      setFault(undefined);
      const okPath = await kickoff(app, auth, '/$export?_type=Patient,Observation');
      const ok = await poll(app, auth, okPath);
      expect(ok.status, ok.text).toBe(200);
      const manifest = JSON.parse(ok.text) as Manifest;
      const patients = manifest.output.find((o) => o.type === 'Patient')!;
      expect(patients.count).toBe(4);
      expect((await download(app, auth, patients.url)).map((r) => r.id).sort()).toEqual([
        'p1',
        'p2',
        'p3',
        'p4',
      ]);
      // Only the completed job's files, none hidden.
      const jobId = okPath.split('/').at(-1)!;
      expect(files.all().every((f) => f.startsWith(`${jobId}/`) && !f.includes('/.'))).toBe(true);
    },
  );
});
