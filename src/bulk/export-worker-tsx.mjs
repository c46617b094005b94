// Development entry of the export worker: lets piscina run the TypeScript source (tests, `tsx`)
// by registering tsx's loader in the worker thread before importing the real entry.
import { register } from 'tsx/esm/api';

register();
const entry = await import('./export-worker.ts');
export default entry.default;
