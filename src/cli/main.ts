#!/usr/bin/env node
// The `fhir-platform-kit` command (bin). `npm start` runs `serve` from the TypeScript source through tsx.
import { runCli } from './program.js';

void runCli(process.argv).then((code) => {
  // Exit once stdout is flushed: pending keep-alive sockets must not hold the process open.
  process.stdout.write('', () => process.exit(code));
});
