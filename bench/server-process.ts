import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CommandName, Commands, Request, Response, ServerInfo } from './server-protocol.js';

const CHILD = fileURLToPath(new URL('./server-child.ts', import.meta.url));
const ROOT = path.resolve(path.dirname(CHILD), '..');

/**
 * How the server child compiles the TypeScript sources: `tsx` (the default), or `plain`
 * (`plain-ts.mjs`: esbuild as the package's build runs it, without tsx's `keepNames`, whose
 * `__name` wrapper makes every closure created in a hot loop several times dearer than in
 * `dist/`). `FPK_BENCH_COMPILE` sets it.
 */
export type BenchCompile = 'tsx' | 'plain';

/** The compile mode of `FPK_BENCH_COMPILE` (default `tsx`). */
export function benchCompile(): BenchCompile {
  const mode = process.env.FPK_BENCH_COMPILE ?? 'tsx';
  if (mode !== 'tsx' && mode !== 'plain') throw new Error(`FPK_BENCH_COMPILE: tsx or plain, not ${mode}`);
  return mode;
}

const LOADER: Record<BenchCompile, string> = {
  tsx: 'tsx',
  plain: fileURLToPath(new URL('./plain-ts.mjs', import.meta.url)),
};

/** A running server child process and a typed way to call it. */
export interface ServerProcess {
  info: ServerInfo;
  call<K extends CommandName>(cmd: K, args: Commands[K]['args']): Promise<Commands[K]['result']>;
  /** Closes the platform and the store, then waits for the process to exit. */
  close(): Promise<void>;
}

/** Forks `server-child.ts` (under tsx) and opens the store and the platform in it. */
export async function startServer(
  options: Commands['open']['args'] & {
    /** Directory for V8 CPU profiles of the server process and its worker threads (`--cpu-prof`). */
    profileDir?: string;
    /** How the child compiles the sources (default: {@link benchCompile}). */
    compile?: BenchCompile;
  },
): Promise<ServerProcess> {
  const { profileDir, compile = benchCompile(), ...open } = options;
  const profile = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [];
  // Extra V8/Node flags for the server process only (e.g. `--trace-gc`), for investigations.
  const extra = (process.env.FPK_BENCH_SERVER_FLAGS ?? '').split(/\s+/).filter((flag) => flag !== '');
  const child: ChildProcess = fork(CHILD, [], {
    cwd: ROOT,
    execArgv: ['--import', LOADER[compile], '--expose-gc', ...profile, ...extra],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let next = 1;
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  const exited = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      for (const p of pending.values()) p.reject(new Error(`bench server exited (${code ?? signal})`));
      pending.clear();
      resolve();
    });
  });
  child.on('message', (message: Response) => {
    const p = pending.get(message.id);
    if (!p) return;
    pending.delete(message.id);
    if (message.ok) p.resolve(message.value);
    else p.reject(new Error(`bench server: ${message.error}`));
  });
  const call = <K extends CommandName>(cmd: K, args: Commands[K]['args']): Promise<Commands[K]['result']> =>
    new Promise((resolve, reject) => {
      const id = next++;
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      const request: Request<K> = { id, cmd, args };
      child.send(request);
    });
  try {
    const info = await call('open', open);
    return {
      info,
      call,
      close: async () => {
        if (child.exitCode === null && child.connected) await call('close', {}).catch(() => undefined);
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      },
    };
  } catch (error) {
    child.kill('SIGKILL');
    await exited;
    throw error;
  }
}
