import fs from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Logger } from 'pino';
import type { FileStore, Storage } from '../index.js';

/** What `serve` keeps of the SIGUSR2 handler: `stop` removes it and waits for a backup under way. */
export interface BackupTrigger {
  stop(): Promise<void>;
}

/**
 * `serve` with `BACKUP_DIR`: each SIGUSR2 writes a backup of the running file store
 * (`FileStore.backup`) into a new directory `<dir>/backup-<UTC time>`, logged when it starts and
 * when it is written (or failed). One at a time: a SIGUSR2 during a backup is logged and ignored.
 * At start, the temporary directories of backups killed mid-copy are removed from `dir`, each
 * logged (`FileStore.removeStaleBackupTemps`).
 */
export function backupOnSignal(storage: Storage, dir: string, logger: Logger): BackupTrigger {
  const store = storage as Partial<FileStore>;
  let running: Promise<void> | undefined;
  const sweep = (store.removeStaleBackupTemps?.(dir) ?? Promise.resolve([])).then(
    (removed) => {
      for (const temp of removed) logger.info({ dir: temp }, 'stale backup directory removed');
    },
    (error: unknown) => logger.warn({ err: error, dir }, 'stale backup directories could not be removed'),
  );
  const onSignal = (): void => {
    if (running) {
      logger.warn('a backup is already running: this SIGUSR2 is ignored');
      return;
    }
    if (typeof store.backup !== 'function') {
      logger.warn('this store has no backup (BACKUP_DIR backs up the file store)');
      return;
    }
    const target = path.join(dir, `backup-${new Date().toISOString().replace(/[:.]/g, '-')}`);
    const started = performance.now();
    logger.info({ dir: target }, 'backup started');
    running = fs
      .mkdir(dir, { recursive: true })
      .then(() => store.backup!(target))
      .then(
        (backup) => logger.info({ ...backup, ms: Math.round(performance.now() - started) }, 'backup written'),
        (error: unknown) => logger.error({ err: error, dir: target }, 'backup failed'),
      )
      .finally(() => {
        running = undefined;
      });
  };
  process.on('SIGUSR2', onSignal);
  return {
    async stop() {
      process.off('SIGUSR2', onSignal);
      await sweep;
      await running;
    },
  };
}
