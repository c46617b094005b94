import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempDir } from '../helpers/temp-dir.js';

const SCRIPT = path.resolve(import.meta.dirname, '../../scripts/dev-idp.ts');

describe('npm run dev-idp', () => {
  it('starts on this Node.js, and never leaves oidc-provider’s runtime warning unexplained', async () => {
    // Where it writes its key file; tsx resolved from here, as `npm run` finds it.
    const child = spawn(process.execPath, ['--import', import.meta.resolve('tsx'), SCRIPT], {
      cwd: tempDir('fpk-dev-idp-'),
      env: { ...process.env, DEV_IDP_PORT: '0', BASE_URL: 'http://localhost:8103' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = once(child, 'exit');
    // Its last line says it is up.
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        if (stdout.includes('Ctrl-C stops it')) resolve();
      });
      child.once('exit', (code) => reject(new Error(`dev-idp exited (${code}): ${stderr}`)));
    });
    child.kill('SIGTERM');
    await exited;
    expect(stdout).toMatch(/Development OpenID provider \(any password\) at http:\/\/127\.0\.0\.1:\d+/);
    const warning = stderr.indexOf('Unsupported runtime. Use Node.js v22');
    if (warning !== -1) {
      // Said first: it runs on the package's Node.js; the warning is oidc-provider's support policy.
      const note = stderr.indexOf('Note: oidc-provider warns "Unsupported runtime"');
      expect(note, stderr).toBeGreaterThanOrEqual(0);
      expect(note).toBeLessThan(warning);
      expect(stderr).toMatch(/runs on Node\.js 20\.19 or later, as the package does/);
    }
  });
});
