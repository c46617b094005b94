// CommonJS host: `require` of the package root.
'use strict';
const express = require('express');
const kit = require('fhir-platform-kit');
const { runFlow } = require('./flow.cjs');

// The testing subpath resolves to the CommonJS build.
if (!require.resolve('fhir-platform-kit/testing').endsWith('/dist/testing.cjs'))
  throw new Error('fhir-platform-kit/testing does not resolve to dist/testing.cjs');

runFlow(kit, express, `CJS, Express ${process.env.EXPRESS_MAJOR}`).catch((error) => {
  console.error(error);
  process.exit(1);
});
