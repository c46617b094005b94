/**
 * The storage contract suite for adapter authors; it runs under vitest.
 * @packageDocumentation
 * @module fhir-platform-kit/testing
 */
// `fhir-platform-kit/testing`: what an adapter author needs to prove a `Storage` adapter. It runs
// inside vitest (an optional peer dependency of this package): import it from a test file only.
export { runStorageContract, collectNdjson } from './storage-contract.js';
export type { MakeStorage } from './storage-contract.js';
