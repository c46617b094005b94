import fs from 'node:fs/promises';
import { calculateJwkThumbprint, exportJWK, generateKeyPair } from 'jose';
import { CliError, UsageError } from './cli-error.js';

/** The algorithms SMART Backend Services asks servers to support for client assertions. */
export const KEY_ALGORITHMS = ['ES384', 'RS384'] as const;
export type KeyAlgorithm = (typeof KEY_ALGORITHMS)[number];

export interface KeysFlags {
  alg: string;
  kid?: string;
  /** The private JWK file (written with mode 0600, never overwritten unless `force`). */
  privateKeyOut: string;
  /** The public JWKS file (never overwritten unless `force`); without it the JWKS goes to stdout. */
  jwksOut?: string;
  /** Replace existing files. */
  force?: boolean;
}

/**
 * Refuses, before anything is written, a file that exists: neither file is replaced by accident,
 * and a refusal leaves no new private key without its JWKS (or the other way round).
 */
async function refuseExisting(files: [flag: string, file: string | undefined][]): Promise<void> {
  for (const [flag, file] of files) {
    if (file === undefined) continue;
    const exists = await fs.stat(file).then(
      () => true,
      () => false,
    );
    if (exists) throw new CliError(`${file} exists; choose another ${flag} or pass --force to replace it`);
  }
}

/** Writes `text` to `file`: created with `mode`, or replaced with `force` ('wx': never by accident). */
async function writeNew(file: string, text: string, force: boolean, mode?: number): Promise<void> {
  try {
    await fs.writeFile(file, text, { ...(mode === undefined ? {} : { mode }), flag: force ? 'w' : 'wx' });
    if (force && mode !== undefined) await fs.chmod(file, mode);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new CliError(
      code === 'EEXIST'
        ? `${file} exists; pass --force to replace it`
        : `Cannot write ${file}: ${(error as Error).message}`,
    );
  }
}

/**
 * `keys`: a new signing key pair. The private JWK (with `kid`, `alg`, `use: sig`) goes to a file
 * only its owner can read; the public JWK Set (the same `kid`) is answered for `new-client --jwks-file`,
 * and written to `jwksOut` when given. Neither file replaces an existing one unless `force`.
 */
export async function generateKeys(flags: KeysFlags): Promise<{ jwks: { keys: object[] }; kid: string }> {
  const alg = flags.alg.toUpperCase();
  if (!(KEY_ALGORITHMS as readonly string[]).includes(alg)) {
    throw new UsageError(`--alg must be one of ${KEY_ALGORITHMS.join(', ')}, got "${flags.alg}"`);
  }
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true });
  const publicJwk = await exportJWK(publicKey);
  const kid = flags.kid ?? (await calculateJwkThumbprint(publicJwk, 'sha256'));
  const meta = { kid, alg, use: 'sig' };
  const privateJwk = { ...(await exportJWK(privateKey)), ...meta };
  const jwks = { keys: [{ ...publicJwk, ...meta }] };
  const force = flags.force ?? false;
  if (!force) {
    await refuseExisting([
      ['--private-key-out', flags.privateKeyOut],
      ['--jwks-out', flags.jwksOut],
    ]);
  }
  // Only its owner may read the private key (0600).
  await writeNew(flags.privateKeyOut, `${JSON.stringify(privateJwk, null, 2)}\n`, force, 0o600);
  if (flags.jwksOut) await writeNew(flags.jwksOut, `${JSON.stringify(jwks, null, 2)}\n`, force);
  return { jwks, kid };
}
