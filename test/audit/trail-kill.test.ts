import { fork } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createAuditTrail, PLATFORM_AUDIT_PROJECT_ID } from '../../src/audit/trail.js';
import { fileStorage } from '../../src/stores.js';
import { tempDir } from '../helpers/temp-dir.js';

const fixture = fileURLToPath(new URL('./fixtures/audit-writer.ts', import.meta.url));
const ROUNDS = Number(process.env.AUDIT_KILL_ROUNDS ?? 4);

/** Runs the writer until it has acknowledged events for a random while, then SIGKILLs it. */
function runAndKill(dir: string, round: number, acked: Map<string, string>): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = fork(fixture, [dir, String(round)], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr?.on('data', (data: Buffer) => (stderr += data.toString()));
    let timer: NodeJS.Timeout | undefined;
    child.on('message', (message: { type: string; id?: string; project?: string | null }) => {
      if (message.type === 'ready') {
        timer = setTimeout(() => child.kill('SIGKILL'), 100 + Math.random() * 300);
        return;
      }
      acked.set(message.id!, message.project ?? PLATFORM_AUDIT_PROJECT_ID);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal === 'SIGKILL') resolve();
      else reject(new Error(`writer exited with ${code}: ${stderr}`));
    });
  });
}

describe('audit trail under kill -9', () => {
  it(`keeps every acknowledged event exactly once over ${ROUNDS} kills`, async () => {
    const dir = tempDir('fpk-audit-kill-');
    const acked = new Map<string, string>();
    for (let round = 0; round < ROUNDS; round++) {
      const before = acked.size;
      await runAndKill(dir, round, acked);
      expect(acked.size).toBeGreaterThan(before);
      // Restart: the trail replays the dead process's journal into the store.
      const storage = await fileStorage({ dir: path.join(dir, 'store') });
      const trail = createAuditTrail({ storage, journalDir: path.join(dir, 'journal'), onError: () => {} });
      await trail.flush();
      for (const projectId of ['p1', PLATFORM_AUDIT_PROJECT_ID]) {
        const page = await storage.searchResources(projectId, 'AuditEvent');
        const ids = page.resources.map((r) => r.id);
        expect(new Set(ids).size).toBe(ids.length);
        const stored = new Set(ids);
        const missing = [...acked].filter(([id, p]) => p === projectId && !stored.has(id));
        expect(missing).toEqual([]);
      }
      await trail.close();
      await storage.close();
    }
  });
});
