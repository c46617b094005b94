// ESM host: `import` of the package root.
import express from 'express';
import * as kit from 'fhir-platform-kit';
import flow from './flow.cjs';

await flow.runFlow(kit, express, `ESM, Express ${process.env.EXPRESS_MAJOR}`);
