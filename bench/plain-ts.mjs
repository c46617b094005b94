/*
 * `node --import ./bench/plain-ts.mjs`: runs the TypeScript sources the way the package's build
 * compiles them (esbuild, no `keepNames`), for benchmarks of what users run. tsx compiles with
 * `keepNames`, which wraps every function it creates in a `__name(…)` call (an
 * `Object.defineProperty`): a closure made in a hot loop then costs several times what it costs in
 * `dist/`. See docs/performance.md, "What the benches run".
 */
import { register } from 'node:module';

register('./plain-ts-hooks.mjs', import.meta.url);
