import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { initProject, newClient, rotateSuperAdmin } from './admin-commands.js';
import { CliError, EXIT, type ExitCode } from './cli-error.js';
import { runExport } from './export.js';
import { importCheck, runImport } from './import.js';
import { generateKeys, KEY_ALGORITHMS } from './keys.js';
import { serve } from './serve.js';
import { plainDescription, serveSettings } from './serve-settings.js';

const DEFAULT_FHIR_URL = 'http://localhost:8103/fhir/R4';

/** The package version, from the package.json above this file (src/cli/ or dist/). */
function packageVersion(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 4; i++) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: string;
        version?: string;
      };
      if (pkg.name === 'fhir-platform-kit' && pkg.version) return pkg.version;
    } catch {
      // Not here: one level up.
    }
    dir = path.dirname(dir);
  }
  return '0.0.0';
}

function integer(name: string, min: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer >= ${min}`);
    return n;
  };
}

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** `--fhir-url` and the client credentials of the commands that call a server. */
function withConnection(command: Command, what: string): Command {
  return command
    .addOption(
      new Option('--fhir-url <url>', 'the FHIR base URL of the server')
        .env('FPK_FHIR_URL')
        .default(DEFAULT_FHIR_URL),
    )
    .addOption(new Option('--client-id <id>', `client id ${what}`).env('FPK_CLIENT_ID'))
    .addOption(
      new Option('--client-secret <secret>', 'authenticate with the client secret').env('FPK_CLIENT_SECRET'),
    )
    .addOption(
      new Option('--private-key <file>', 'authenticate with a private JWK (private_key_jwt)').env(
        'FPK_PRIVATE_KEY',
      ),
    )
    .addOption(new Option('--scope <scopes>', 'scopes to ask the token endpoint for').env('FPK_SCOPE'));
}

function withProgress(command: Command): Command {
  return command
    .option('-q, --quiet', 'no progress display')
    .option(
      '--progress-interval <ms>',
      'milliseconds between progress lines when stderr is not a terminal',
      integer('--progress-interval', 10),
    );
}

const EXIT_HELP = `
Exit codes:
  0  done
  1  failed (refused by the server, wrong credentials, network or file error)
  2  usage error (unknown command or flag, missing or malformed value)
  3  finished, but the data did not check out (export line counts, refused import lines)`;

/** The `fhir-platform-kit` command line (commander). */
export function buildProgram(): Command {
  const program = new Command('fhir-platform-kit')
    .description('FHIR platform kit: run the standalone server, administer projects, export and import data')
    .version(packageVersion())
    .option('--verbose', 'print the stack trace of a failure')
    .exitOverride()
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', EXIT_HELP);

  const serveCommand = program
    .command('serve')
    .description(
      'run the standalone server (every router on the embedded file store, or PostgreSQL); logs JSON lines',
    );
  // Every flag from SERVE_SETTINGS; each wins over its environment variable (serve.ts).
  for (const [, setting] of serveSettings()) serveCommand.option(setting.flag, plainDescription(setting));
  serveCommand
    .addHelpText('after', EXIT_HELP)
    .action(async (flags: Parameters<typeof serve>[0]) => serve(flags));

  withConnection(
    program
      .command('init-project')
      .description(
        'create a project with its admin user (Project/$init); prints { projectId, name, project }',
      ),
    'of a super-admin client',
  )
    .option('--data-dir <dir>', 'act on the file store of this data directory, without a server')
    .requiredOption('--name <name>', 'the project name')
    .option('--owner-email <email>', "the admin's e-mail")
    .option('--owner-given-name <name>', "the admin's given name")
    .option('--owner-family-name <name>', "the admin's family name")
    .addOption(
      new Option('--scim-default-user-type <type>', "the project's SCIM defaultUserType").choices([
        'Patient',
        'Practitioner',
        'RelatedPerson',
      ]),
    )
    .option('--scim-echo-user-name', "the project's SCIM echoUserName")
    .addHelpText('after', EXIT_HELP)
    .action(async (flags: Parameters<typeof initProject>[0]) => printJson(await initProject(flags)));

  withConnection(
    program
      .command('new-client')
      .description(
        'register a backend client in a project ($new-client); prints { clientId, clientSecret, projectId, ... }',
      ),
    'of a super-admin or project-admin client',
  )
    .option('--data-dir <dir>', 'act on the file store of this data directory, without a server')
    .requiredOption('--project <id>', 'the project id')
    .requiredOption('--name <name>', 'the client name')
    .option('--client-scope <scopes>', 'scopes the new client may be granted (default: the server default)')
    .option('--admin', 'project-admin rights (project:admin)')
    .option('--jwks-file <file>', 'its public JWK Set (from `keys`), for private_key_jwt')
    .option('--jwks-url <url>', 'where it publishes its JWK Set')
    .option(
      '--access-token-lifetime <seconds>',
      'access token lifetime',
      integer('--access-token-lifetime', 1),
    )
    .addHelpText('after', EXIT_HELP)
    .action(async (flags: Parameters<typeof newClient>[0]) => printJson(await newClient(flags)));

  program
    .command('rotate-super-admin-secret')
    .description(
      'give the super-admin client a new random secret; prints { clientId, clientSecret } (the secret only this once)',
    )
    .option(
      '--data-dir <dir>',
      "the file store of this data directory (the server's DATA_DIR; stop the server first)",
    )
    .option('--database-url <url>', 'the PostgreSQL store (servers may keep running on it)')
    .option('--client-id <id>', 'the super-admin client', 'super-admin')
    .addHelpText('after', EXIT_HELP)
    .action(async (flags: Parameters<typeof rotateSuperAdmin>[0]) =>
      printJson(await rotateSuperAdmin(flags)),
    );

  program
    .command('keys')
    .description(
      'generate a signing key pair for SMART Backend Services: private JWK to a file, public JWKS to stdout',
    )
    .addOption(new Option('--alg <alg>', 'signing algorithm').choices([...KEY_ALGORITHMS]).default('ES384'))
    .option('--kid <kid>', 'key id (default: the JWK thumbprint)')
    .option('--private-key-out <file>', 'the private JWK file, mode 0600', 'private-key.json')
    .option(
      '--jwks-out <file>',
      'write the public JWKS to this file instead of stdout (not over an existing one: a shell redirection would empty it first)',
    )
    .option('--force', 'replace existing --private-key-out and --jwks-out files')
    .addHelpText('after', EXIT_HELP)
    .action(async (flags: Parameters<typeof generateKeys>[0]) => {
      const { jwks, kid } = await generateKeys(flags);
      printJson(
        flags.jwksOut
          ? { kid, privateKey: path.resolve(flags.privateKeyOut), jwks: path.resolve(flags.jwksOut) }
          : jwks,
      );
    });

  withProgress(
    withConnection(
      program
        .command('export')
        .description(
          'run a Bulk Data export and download its files (resumable); prints a summary with line counts',
        ),
      'of a backend client',
    ),
  )
    .option('--patient', 'Patient-level export (Patient/$export)')
    .option('--group <id>', 'Group-level export (Group/<id>/$export)')
    .option('--type <types>', '_type: resource types, comma-separated (repeatable)', collect)
    .option('--since <instant>', '_since: only resources changed after this FHIR instant')
    .option(
      '--type-filter <filter>',
      '_typeFilter: Type?search, e.g. Observation?code=1234 (repeatable, ORed per type; a comma inside one as %2C)',
      collect,
    )
    .option('--output-format <format>', '_outputFormat')
    .option('-o, --out <dir>', 'the output directory', 'export')
    .option('--restart', 'forget an unfinished export in --out and start a new one')
    .option('--keep', 'do not delete the job on the server after downloading')
    .addHelpText('after', EXIT_HELP)
    .action(async (flags: Parameters<typeof runExport>[0]) => printJson(await runExport(flags)));

  withProgress(
    withConnection(
      program
        .command('import')
        .description('upload NDJSON files (or directories of *.ndjson) into the project; prints a summary')
        .argument('<paths...>', 'NDJSON files or directories'),
      'of a client that may write the resources',
    ),
  )
    .addHelpText('after', EXIT_HELP)
    .action(async (paths: string[], flags: Parameters<typeof runImport>[1]) => {
      const { summary, failed } = await runImport(paths, flags);
      printJson(summary);
      const problem = importCheck(failed);
      if (problem) throw problem;
    });

  return program;
}

/** Runs the command line; answers the exit code (errors are one line on stderr). */
export async function runCli(argv: string[]): Promise<ExitCode> {
  const verbose = argv.includes('--verbose');
  try {
    await buildProgram().parseAsync(argv);
    return EXIT.ok;
  } catch (error) {
    if (error instanceof CommanderError) {
      // Commander printed its message (or the help/version) already.
      return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`fhir-platform-kit: ${message}\n`);
    if (verbose && error instanceof Error && error.stack) process.stderr.write(`${error.stack}\n`);
    return error instanceof CliError ? error.exitCode : EXIT.failure;
  }
}
