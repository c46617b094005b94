// ESM host: `import` of the package root.
import express from 'express';
import * as kit from 'fhir-platform-kit';
import flow from './flow.cjs';

// The testing subpath resolves to the ESM build (it runs under vitest: see contract.test.mjs).
if (!import.meta.resolve('fhir-platform-kit/testing').endsWith('/dist/testing.js'))
  throw new Error('fhir-platform-kit/testing does not resolve to dist/testing.js');

await flow.runFlow(kit, express, `ESM, Express ${process.env.EXPRESS_MAJOR}`);
// The bin, once per Express major: `npx fhir-platform-kit keys`, `import` and a Group `export`.
await flow.runCliFlow(kit, express, `ESM + CLI, Express ${process.env.EXPRESS_MAJOR}`);
