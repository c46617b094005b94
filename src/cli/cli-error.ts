/**
 * Exit codes of the `fhir-platform-kit` command line, which scripts can rely on (docs/getting-started.md).
 */
export const EXIT = {
  /** The command did what it was asked. */
  ok: 0,
  /** It failed: the server refused (wrong credentials, an error answer), the network, the file system. */
  failure: 1,
  /** The command line itself is wrong: an unknown command or flag, a missing or malformed value. */
  usage: 2,
  /**
   * It ran to the end but the data did not check out: an exported file's line count differs from
   * the manifest's `count`, or an import had lines the server refused.
   */
  check: 3,
} as const;

export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

/** A failure the command line reports as one line on stderr (no stack trace unless `--verbose`). */
export class CliError extends Error {
  readonly exitCode: ExitCode;
  constructor(message: string, exitCode: ExitCode = EXIT.failure, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}

/** A wrong command line (exit code 2). */
export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
    this.name = 'UsageError';
  }
}
