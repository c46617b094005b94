import fs from 'node:fs';
import path from 'node:path';
import exportTask from '../src/bulk/export-worker.js';
import type { ExportTask, ExportTaskResult } from '../src/bulk/export-task.js';
import type { WorkerProbe } from './server-protocol.js';

/**
 * The export worker entry wrapped with a memory probe: while the task runs, samples this worker
 * thread's own V8 isolate (`process.memoryUsage()` in a worker reports the isolate's heap and
 * external memory; `rss` is the whole process's) every 10 ms, then writes the peaks to
 * `$FPK_BENCH_PROBE_DIR/<jobId>.json`. Worker threads share the process RSS, so the isolate figures
 * are the only per-worker memory there is.
 */
export default async function probedExportTask(task: ExportTask): Promise<ExportTaskResult> {
  const probe: WorkerProbe = {
    peakIsolateBytes: 0,
    peakHeapUsed: 0,
    peakProcessRss: 0,
    peakLiveBytes: 0,
    samples: 0,
  };
  const sample = (): void => {
    const m = process.memoryUsage();
    probe.peakIsolateBytes = Math.max(probe.peakIsolateBytes, m.heapTotal + m.external);
    probe.peakHeapUsed = Math.max(probe.peakHeapUsed, m.heapUsed);
    probe.peakProcessRss = Math.max(probe.peakProcessRss, m.rss);
    probe.samples++;
  };
  // Diagnostic (`--probe-gc`): memory still reachable after a full GC, every 100 ms; it tells
  // retained memory from garbage not yet collected. Needs --expose-gc (a process-wide V8 flag).
  const gc = (globalThis as { gc?: () => void }).gc;
  const live = (): void => {
    gc?.();
    const m = process.memoryUsage();
    probe.peakLiveBytes = Math.max(probe.peakLiveBytes, m.heapUsed + m.external);
  };
  sample();
  const timer = setInterval(sample, 10);
  const probeGc = process.env.FPK_BENCH_PROBE_GC === '1' && gc !== undefined;
  if (probeGc) live();
  const liveTimer = probeGc ? setInterval(live, 100) : undefined;
  try {
    return await exportTask(task);
  } finally {
    clearInterval(timer);
    if (liveTimer) clearInterval(liveTimer);
    if (probeGc) live();
    sample();
    const dir = process.env.FPK_BENCH_PROBE_DIR;
    if (dir) fs.writeFileSync(path.join(dir, `${task.jobId}.json`), JSON.stringify(probe));
  }
}
