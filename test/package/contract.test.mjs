// An adapter author's test: the storage contract suite from the installed package's `testing`
// subpath, run by the host's own vitest against the shipped file store.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileStorage } from 'fhir-platform-kit';
import { runStorageContract } from 'fhir-platform-kit/testing';

runStorageContract('fileStorage from the packed tarball', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fpk-package-contract-'));
  const storage = await fileStorage({ dir });
  return {
    storage,
    cleanup: async () => {
      await storage.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});
