import fs from 'node:fs';
import path from 'node:path';
import {
  fhirPlatform,
  fileStorage,
  NotFoundError,
  rotateSuperAdminSecret,
  StorageLockedError,
  toOperationOutcome,
  type PlatformAdmin,
  type Storage,
} from '../index.js';
import { CliError, UsageError } from './cli-error.js';
import { CONNECTION_STRING_FORMS, connectionStringProblem, withoutPassword } from './database-url.js';
import { connectionOf, reasonOf, ServerClient, type ConnectionFlags } from './server-client.js';

/** Where an administration command acts: a running server over HTTP, or a file store directory. */
export interface AdminTargetFlags extends Partial<ConnectionFlags> {
  /** The server's data directory (its `store/` is opened through `platform.admin`). */
  dataDir?: string;
}

export interface InitProjectFlags extends AdminTargetFlags {
  name: string;
  ownerEmail?: string;
  ownerGivenName?: string;
  ownerFamilyName?: string;
  scimDefaultUserType?: string;
  scimEchoUserName?: boolean;
}

export interface NewClientFlags extends AdminTargetFlags {
  project: string;
  name: string;
  clientScope?: string;
  admin?: boolean;
  jwksFile?: string;
  jwksUrl?: string;
  accessTokenLifetime?: number;
}

type Parameter = { name: string } & Record<string, unknown>;
interface Parameters {
  resourceType: 'Parameters';
  parameter: Parameter[];
}

function parameters(list: (Parameter | false | undefined)[]): Parameters {
  return { resourceType: 'Parameters', parameter: list.filter((p): p is Parameter => Boolean(p)) };
}

/** What an offline command tells the user to do when a server has its store open. */
const WHILE_SERVING = {
  // init-project and new-client have an HTTP form.
  admin: 'stop it, or run this command against the server with --fhir-url and client credentials',
  // rotate-super-admin-secret has none: a running server takes a secret of the user's choice instead.
  rotate:
    'stop it and run this command again, or restart the server with SUPER_ADMIN_CLIENT_ID and SUPER_ADMIN_CLIENT_SECRET set to a secret of your choice (serve sets it at each start)',
} as const;

/**
 * Opens the file store of a data directory (`<dataDir>/store`, as `serve` keeps it). With `create`,
 * a directory that does not exist yet is created (`init-project` seeds a store before its first
 * start); without, it must hold a store already. `whileServing` says what to do when a server has
 * it open.
 */
async function openDataDir(
  dataDir: string,
  create: boolean,
  whileServing: keyof typeof WHILE_SERVING = 'admin',
): Promise<Storage> {
  const dir = path.resolve(dataDir);
  const storeDir = path.join(dir, 'store');
  if (!create && !fs.existsSync(storeDir)) {
    throw new CliError(`The data directory ${dir} has no store yet (${storeDir} does not exist)`);
  }
  try {
    return await fileStorage({ dir: storeDir });
  } catch (error) {
    if (error instanceof StorageLockedError) {
      throw new CliError(`${error.message}: a server is running on it; ${WHILE_SERVING[whileServing]}`, 1, {
        cause: error,
      });
    }
    throw error;
  }
}

/** A failure of the library said as one line: its HTTP answer's status and reason. */
function refused(error: unknown): CliError {
  if (error instanceof CliError) return error;
  const { status, outcome } = toOperationOutcome(error);
  return new CliError(`Refused: ${status} ${reasonOf(JSON.stringify(outcome))}`, 1, { cause: error });
}

/** Runs `action` with `platform.admin` over the file store in `dataDir`, then closes the store. */
async function withOfflineAdmin<T>(
  dataDir: string,
  action: (admin: PlatformAdmin) => Promise<T>,
  options: { create?: boolean } = {},
): Promise<T> {
  const storage = await openDataDir(dataDir, options.create ?? false);
  try {
    return await action(fhirPlatform({ storage, bulk: false }).admin);
  } catch (error) {
    throw refused(error);
  } finally {
    await storage.close();
  }
}

/** Offline (`--data-dir`) or over HTTP (`--fhir-url` and client credentials), never both. */
function target(flags: AdminTargetFlags): { dataDir: string } | { client: ServerClient } {
  const online = Boolean(flags.clientId || flags.clientSecret || flags.privateKey);
  if (flags.dataDir) {
    if (online) throw new UsageError('--data-dir works without a server: leave out the client credentials');
    return { dataDir: flags.dataDir };
  }
  const { fhirBase, credentials } = connectionOf({ fhirUrl: flags.fhirUrl ?? '', ...flags });
  return { client: new ServerClient(fhirBase, credentials) };
}

/** `init-project`: `Project/$init`; answers `{ projectId, name }`. */
export async function initProject(flags: InitProjectFlags): Promise<Record<string, unknown>> {
  const body = parameters([
    { name: 'name', valueString: flags.name },
    flags.ownerEmail !== undefined && { name: 'ownerEmail', valueString: flags.ownerEmail },
    flags.ownerGivenName !== undefined && { name: 'ownerGivenName', valueString: flags.ownerGivenName },
    flags.ownerFamilyName !== undefined && { name: 'ownerFamilyName', valueString: flags.ownerFamilyName },
    flags.scimDefaultUserType !== undefined && {
      name: 'scimDefaultUserType',
      valueCode: flags.scimDefaultUserType,
    },
    flags.scimEchoUserName !== undefined && {
      name: 'scimEchoUserName',
      valueBoolean: flags.scimEchoUserName,
    },
  ]);
  const where = target(flags);
  const project =
    'dataDir' in where
      ? ((await withOfflineAdmin(where.dataDir, (admin) => admin.initProject(body), {
          create: true,
        })) as unknown as Record<string, unknown>)
      : await where.client.operation('Project/$init', '/Project/$init', body);
  return { projectId: project.id, name: project.name, project };
}

/** `new-client`: `$new-client`; answers `{ clientId, clientSecret, projectId, … }`. */
export async function newClient(flags: NewClientFlags): Promise<Record<string, unknown>> {
  if (flags.jwksFile && flags.jwksUrl) throw new UsageError('Give --jwks-file or --jwks-url, not both');
  let jwks: string | undefined;
  if (flags.jwksFile) {
    try {
      jwks = fs.readFileSync(flags.jwksFile, 'utf8');
    } catch (error) {
      throw new CliError(`Cannot read ${flags.jwksFile}: ${(error as Error).message}`);
    }
  }
  const body = parameters([
    { name: 'name', valueString: flags.name },
    jwks !== undefined && { name: 'jwks', valueString: jwks },
    flags.jwksUrl !== undefined && { name: 'jwksUri', valueUri: flags.jwksUrl },
    flags.clientScope !== undefined && { name: 'scope', valueString: flags.clientScope },
    flags.admin !== undefined && { name: 'admin', valueBoolean: flags.admin },
    flags.accessTokenLifetime !== undefined && {
      name: 'accessTokenLifetime',
      valueInteger: flags.accessTokenLifetime,
    },
  ]);
  const where = target(flags);
  const client =
    'dataDir' in where
      ? ((await withOfflineAdmin(where.dataDir, (admin) =>
          admin.newClient(flags.project, body),
        )) as unknown as Record<string, unknown>)
      : await where.client.operation(
          '$new-client',
          `/Project/${encodeURIComponent(flags.project)}/$new-client`,
          body,
        );
  return {
    clientId: client.id,
    clientSecret: client.secret,
    projectId: flags.project,
    name: client.name,
    scope: client.scope,
    admin: client.admin,
  };
}

export interface RotateSuperAdminSecretFlags {
  /** The server's data directory (its file store, which must not be in use). */
  dataDir?: string;
  /** The PostgreSQL store (servers may keep running on it). */
  databaseUrl?: string;
  /** The super-admin client. */
  clientId: string;
}

/**
 * `rotate-super-admin-secret`: a new random secret for the super-admin client of a file store
 * (`--data-dir`, the server stopped) or a PostgreSQL store (`--database-url`); answers
 * `{ clientId, clientSecret }`, the only time the secret is shown.
 */
export async function rotateSuperAdmin(flags: RotateSuperAdminSecretFlags): Promise<Record<string, unknown>> {
  if (Boolean(flags.dataDir) === Boolean(flags.databaseUrl)) {
    throw new UsageError('Give --data-dir (the file store) or --database-url (PostgreSQL), one of them');
  }
  const problem = flags.databaseUrl ? connectionStringProblem(flags.databaseUrl) : undefined;
  if (problem) {
    throw new UsageError(
      `--database-url must be ${CONNECTION_STRING_FORMS}, got "${withoutPassword(flags.databaseUrl!)}", which ${problem}`,
    );
  }
  const storage = flags.databaseUrl
    ? (await import('../postgres.js')).postgresStorage({ connectionString: flags.databaseUrl })
    : await openDataDir(flags.dataDir!, false, 'rotate');
  try {
    const { clientId, clientSecret } = await rotateSuperAdminSecret(storage, { clientId: flags.clientId });
    return { clientId, clientSecret };
  } catch (error) {
    if (error instanceof NotFoundError) {
      throw new CliError(
        `This store has no client ${flags.clientId}: serve creates the super-admin client on its first start`,
        1,
        { cause: error },
      );
    }
    throw refused(error);
  } finally {
    await storage.close();
  }
}
