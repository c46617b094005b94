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
  /** The public JWKS file; without it the JWKS goes to stdout. */
  jwksOut?: string;
  force?: boolean;
}

/**
 * `keys`: a new signing key pair. The private JWK (with `kid`, `alg`, `use: sig`) goes to a file
 * only its owner can read; the public JWK Set (the same `kid`) is answered for `new-client --jwks-file`.
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
  try {
    // 'wx': never replace an existing key by accident; mode 0600 on creation.
    await fs.writeFile(flags.privateKeyOut, `${JSON.stringify(privateJwk, null, 2)}\n`, {
      mode: 0o600,
      flag: flags.force ? 'w' : 'wx',
    });
    if (flags.force) await fs.chmod(flags.privateKeyOut, 0o600);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new CliError(
      code === 'EEXIST'
        ? `${flags.privateKeyOut} exists; choose another --private-key-out or pass --force`
        : `Cannot write ${flags.privateKeyOut}: ${(error as Error).message}`,
    );
  }
  const jwks = { keys: [{ ...publicJwk, ...meta }] };
  if (flags.jwksOut) {
    try {
      await fs.writeFile(flags.jwksOut, `${JSON.stringify(jwks, null, 2)}\n`);
    } catch (error) {
      throw new CliError(`Cannot write ${flags.jwksOut}: ${(error as Error).message}`);
    }
  }
  return { jwks, kid };
}
