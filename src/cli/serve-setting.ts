/**
 * Refuses a setting's text: the error says what the value must be (`expected`) and, when given,
 * what is wrong with this one (`which`: `has the scheme "ftp:"`).
 */
export type Invalid = (expected: string, which?: string) => never;

/**
 * One setting of `serve`: its flag and environment variable, its default, its description and how
 * its text is read. `SERVE_SETTINGS` (serve-settings.ts, its groups in serve-settings-store.ts,
 * -data.ts and -identity.ts) is the only place a setting is written: the commander
 * options (program.ts), the flags laid over the environment (serve.ts), `readConfig`
 * (serve-config.ts) and the tables of the README and docs/getting-started.md
 * (`npm run docs:serve`) are all derived from it.
 */
export interface ServeSetting<T> {
  /** The environment variable (`PORT`). */
  env: string;
  /**
   * The flag, with its value's placeholder (`--port <port>`); without one it is a switch that
   * stands for `true`. Its commander attribute (`--data-dir`: `dataDir`) is the setting's key.
   */
  flag: string;
  /** The default as `--help` and the docs show it (`8103`); absent: unset. */
  defaultText?: string;
  /** What it does, one sentence (Markdown: the docs keep it, `--help` drops backticks and links). */
  description: string;
  /** `file` or `postgres`: given with the other store, `serve` refuses it rather than ignore it. */
  store?: 'file' | 'postgres';
  /**
   * The value, from the variable's text: trimmed, `undefined` when unset or empty (the default
   * then). Calls `invalid(expected, which)` on a bad text, which throws a `UsageError` naming the
   * variable, the flag and the text.
   */
  read(text: string | undefined, invalid: Invalid): T;
  /** The text as a refusal quotes it, when it may hold a secret (a connection string's password). */
  quote?(text: string): string;
}
