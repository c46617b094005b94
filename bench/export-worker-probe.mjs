// Worker entry for the benchmark's export pool: registers tsx in the worker thread (the sources are
// TypeScript) and runs the export worker wrapped with a memory probe (export-worker-probe.ts).
import { register } from 'tsx/esm/api';

register();
const entry = await import('./export-worker-probe.ts');
export default entry.default;
