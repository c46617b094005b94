// TypeScript host (strict, exactOptionalPropertyTypes, NodeNext): the published declarations must
// type-check as a host writes them; the compiled file then runs the shared flow.
import express from 'express';
import {
  fhirPlatform,
  fileStorage,
  type FhirPlatformOptions,
  type Principal,
  type Storage,
} from 'fhir-platform-kit';
import * as kit from 'fhir-platform-kit';
import type { MakeStorage } from 'fhir-platform-kit/testing';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { runFlow } = require('./flow.cjs') as {
  runFlow: (lib: typeof kit, host: typeof express, label: string) => Promise<void>;
};

// The contract suite's store factory type, as an adapter author writes it.
export const makeStorage: MakeStorage = async () => {
  const storage = kit.memoryStorage();
  return { storage, cleanup: () => storage.close() };
};

// Typed uses of the public surface: options objects, a custom authenticator, the storage type.
async function typedSurface(dir: string): Promise<void> {
  const storage: Storage = await fileStorage({ dir });
  const authenticate = (): Principal => ({
    projectId: null,
    kind: 'super-admin',
    id: 'host',
    scopes: [],
    admin: false,
    superAdmin: true,
  });
  const options: FhirPlatformOptions = { storage, exportDir: `${dir}-exports`, authenticate };
  const platform = fhirPlatform(options);
  const app = express();
  app.use('/api', platform.router);
  await platform.close();
  await storage.close();
}

const { mkdtempSync, rmSync } = await import('node:fs');
const { tmpdir } = await import('node:os');
const { join } = await import('node:path');
const dir = mkdtempSync(join(tmpdir(), 'fpk-package-ts-'));
await typedSurface(join(dir, 'store'));
rmSync(dir, { recursive: true, force: true });
await runFlow(kit, express, `TypeScript, Express ${process.env.EXPRESS_MAJOR}`);
