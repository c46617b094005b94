import fs from 'node:fs';
import path from 'node:path';
import { bearer, expectJson } from './http-json.js';
import { now } from './stats.js';

/**
 * Uploads one NDJSON file to the FHIR router's upload route (`POST [base]` with
 * `multipart/form-data`), streamed from disk; answers the time to the OperationOutcome and the
 * number of rejected lines it reports.
 */
export async function uploadNdjson(
  fhirBase: string,
  token: string,
  file: string,
): Promise<{ ms: number; failed: number }> {
  const form = new FormData();
  form.append('file', await fs.openAsBlob(file, { type: 'application/fhir+ndjson' }), path.basename(file));
  const start = now();
  const answer = await expectJson(200, fhirBase, { method: 'POST', headers: bearer(token), body: form });
  const ms = now() - start;
  const issues = (answer.body as { issue?: { severity: string }[] }).issue ?? [];
  return { ms, failed: issues.filter((i) => i.severity === 'error').length };
}
