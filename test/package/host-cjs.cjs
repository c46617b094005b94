// CommonJS host: `require` of the package root.
'use strict';
const express = require('express');
const kit = require('fhir-platform-kit');
const { runFlow } = require('./flow.cjs');

runFlow(kit, express, `CJS, Express ${process.env.EXPRESS_MAJOR}`).catch((error) => {
  console.error(error);
  process.exit(1);
});
