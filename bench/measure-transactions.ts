import fs from 'node:fs';
import path from 'node:path';
import { bearer, expectJson } from './http-json.js';
import { now } from './stats.js';

/** The Synthea bundle files of `dir` in load order: shared hospital and practitioner bundles first. */
export function syntheaBundleFiles(dir: string): string[] {
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
  const shared = files.filter((f) => /^(hospital|practitioner)Information/.test(f)).sort();
  const patients = files.filter((f) => /_[0-9a-f]{8}-[0-9a-f]{4}-/.test(f)).sort();
  return [...shared, ...patients].map((f) => path.join(dir, f));
}

/**
 * Posts every Synthea bundle of `dir` (transaction and batch Bundles, as Synthea writes them) to
 * `POST [base]` as a loader would: the shared hospital and practitioner bundles one after the other
 * (the patients' bundles refer to their resources), then the patients' bundles with `concurrency`
 * requests in flight. Answers the time from the first request to the last answer and the entries
 * posted. The files are read before the clock starts. `prefer`, when given, is sent as the `Prefer`
 * header (`return=minimal`: answers without the stored resources).
 */
export async function postBundles(
  fhirBase: string,
  token: string,
  dir: string,
  concurrency = 1,
  prefer?: string,
): Promise<{ ms: number; resources: number }> {
  const files = syntheaBundleFiles(dir);
  const bodies = files.map((file) => fs.readFileSync(file));
  let resources = 0;
  for (const body of bodies) {
    resources += (JSON.parse(body.toString('utf8')) as { entry?: unknown[] }).entry?.length ?? 0;
  }
  const shared = files.filter((f) => /^(hospital|practitioner)Information/.test(path.basename(f))).length;
  const headers = bearer(token, {
    'content-type': 'application/fhir+json',
    ...(prefer ? { prefer } : {}),
  });
  const post = (body: Buffer): Promise<unknown> =>
    expectJson(200, fhirBase, { method: 'POST', headers, body });
  const start = now();
  for (const body of bodies.slice(0, shared)) await post(body);
  let next = shared;
  const worker = async (): Promise<void> => {
    while (next < bodies.length) await post(bodies[next++]!);
  };
  await Promise.all(Array.from({ length: Math.max(1, concurrency) }, worker));
  return { ms: now() - start, resources };
}
