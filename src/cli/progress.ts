import cliProgress from 'cli-progress';

/** A progress display on stderr (stdout is kept for the command's JSON answer). */
export interface Progress {
  /** Sets the position; `total` and `text` change only when given. */
  update(value: number, total?: number, text?: string): void;
  /** Draws the last state and ends the display (a final line when stderr is not a terminal). */
  stop(): void;
}

export interface ProgressOptions {
  /** The stream drawn on. @default process.stderr */
  stream?: NodeJS.WriteStream;
  /** Milliseconds between plain lines when the stream is not a terminal. @default 1000 */
  lineInterval?: number;
  /** No display at all (`--quiet`). @default false */
  quiet?: boolean;
}

/**
 * A progress bar (cli-progress). On a terminal it redraws one line in place; on anything else (a
 * pipe, a CI log) cli-progress's no-TTY mode writes a plain line every `lineInterval`, without
 * escape sequences.
 */
export function progressBar(label: string, options: ProgressOptions = {}): Progress {
  if (options.quiet) return { update: () => undefined, stop: () => undefined };
  const stream = options.stream ?? process.stderr;
  const tty = stream.isTTY === true;
  const bar = new cliProgress.SingleBar(
    {
      stream,
      format: `${label} [{bar}] {percentage}% | {text}`,
      noTTYOutput: true,
      notTTYSchedule: options.lineInterval ?? 1000,
      // No signal handlers of its own (they would keep Ctrl-C from ending the command), so the
      // cursor is never hidden either.
      hideCursor: false,
      gracefulExit: false,
      // Plain ASCII: the no-TTY lines end up in logs.
      barCompleteChar: '=',
      barIncompleteChar: tty ? '\u2591' : '-',
    },
    cliProgress.Presets.legacy,
  );
  let started = false;
  let last = { value: 0, total: 1, text: '' };
  return {
    update(value, total, text) {
      last = { value, total: total ?? last.total, text: text ?? last.text };
      if (!started) {
        started = true;
        bar.start(last.total, value, { text: last.text });
        return;
      }
      if (total !== undefined) bar.setTotal(total);
      bar.update(value, { text: last.text });
    },
    stop() {
      if (!started) return;
      started = false;
      bar.update(last.value, { text: last.text });
      bar.stop();
    },
  };
}
