import { randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, importJWK, type CryptoKey, type JWK } from 'jose';
import { checkOptionKeys, type OptionKeys } from '../../common/option-keys.js';
import { optionError } from '../../common/options.js';
import type { SigningKeyRecord, Storage } from '../../storage/types.js';

/** Algorithms the server signs access tokens with. */
export type SigningAlgorithm = 'ES256' | 'RS256';

/** Every algorithm a server key may carry (what `bearerAuth` accepts by default). */
export const SIGNING_ALGORITHMS: readonly SigningAlgorithm[] = ['ES256', 'RS256'];

export interface SigningKeysOptions {
  /**
   * Algorithm of newly generated keys.
   * @default 'ES256'
   */
  algorithm?: SigningAlgorithm;
  /**
   * Seconds a retired key keeps verifying after `rotate()`. Keep it at least as long as the longest
   * access token lifetime (`TokenRouterOptions.accessTokenLifetimeCap`), so no token outlives its key.
   * @default 7776000 (90 days)
   */
  retention?: number;
  /**
   * Seconds between re-reads of the key list from storage, so a rotation done by another instance
   * sharing the store is picked up. An unknown `kid` triggers a re-read at once.
   * @default 60
   */
  refreshInterval?: number;
  /** Clock, for tests. @default Date.now */
  now?: () => number;
}

const SIGNING_KEYS_KEYS: OptionKeys<SigningKeysOptions> = {
  algorithm: true,
  retention: true,
  refreshInterval: true,
  now: true,
};

/** The key that signs new tokens. */
export interface ActiveSigningKey {
  kid: string;
  alg: SigningAlgorithm;
  privateKey: CryptoKey;
}

/** A key that verifies tokens. */
export interface VerificationKey {
  kid: string;
  alg: SigningAlgorithm;
  publicKey: CryptoKey;
}

/**
 * The server's access-token signing keys, kept in storage (`saveSigningKey` / `listSigningKeys`).
 * A key is generated on first use. `rotate()` starts signing with a new key and keeps the old ones
 * verifying for `retention` seconds. One instance per mount; instances sharing a store agree
 * through the store.
 */
export interface SigningKeys {
  /** The key for new tokens (generated and saved when none is usable). */
  current(): Promise<ActiveSigningKey>;
  /** The verification key with this `kid`, or undefined when unknown, expired or malformed. */
  resolve(kid: string): Promise<VerificationKey | undefined>;
  /** The public JWKS of every key that still verifies (RFC 7517 §5). */
  jwks(): Promise<{ keys: JWK[] }>;
  /** Generates a new signing key and retires the current ones. Resolves the new key's record. */
  rotate(): Promise<SigningKeyRecord>;
}

function isAlgorithm(alg: string): alg is SigningAlgorithm {
  return (SIGNING_ALGORITHMS as readonly string[]).includes(alg);
}

/** Creates the signing key set of one mount over `storage`. */
export function signingKeys(storage: Storage, options: SigningKeysOptions = {}): SigningKeys {
  checkOptionKeys('signingKeys', options, SIGNING_KEYS_KEYS);
  const algorithm = options.algorithm ?? 'ES256';
  if (!isAlgorithm(algorithm))
    optionError('signingKeys', 'algorithm', `algorithm must be one of ${SIGNING_ALGORITHMS.join(', ')}`);
  const retention = options.retention ?? 90 * 24 * 3600;
  if (!Number.isFinite(retention) || retention < 0)
    optionError('signingKeys', 'retention', 'retention must be >= 0 seconds');
  const refreshMs = (options.refreshInterval ?? 60) * 1000;
  const now = options.now ?? Date.now;

  let records: SigningKeyRecord[] = [];
  let loadedAt = -Infinity;
  let loading: Promise<void> | undefined;
  let generating: Promise<SigningKeyRecord> | undefined;
  const privateKeys = new Map<string, Promise<CryptoKey>>();
  const publicKeys = new Map<string, Promise<CryptoKey>>();

  function load(): Promise<void> {
    loading ??= storage
      .listSigningKeys()
      .then((list) => {
        records = list;
        loadedAt = now();
      })
      .finally(() => {
        loading = undefined;
      });
    return loading;
  }

  async function fresh(): Promise<void> {
    if (now() - loadedAt >= refreshMs) await load();
  }

  const usable = (r: SigningKeyRecord): boolean => !r.expiresAt || Date.parse(r.expiresAt) > now();
  const signing = (r: SigningKeyRecord): boolean =>
    isAlgorithm(r.alg) && usable(r) && (!r.retiredAt || Date.parse(r.retiredAt) > now());

  function newest(): SigningKeyRecord | undefined {
    return records.filter(signing).sort((a, b) => b.createdAt.localeCompare(a.createdAt))[0];
  }

  async function generate(): Promise<SigningKeyRecord> {
    const { privateKey, publicKey } = await generateKeyPair(algorithm, { extractable: true });
    const kid = randomUUID();
    const meta = { kid, alg: algorithm, use: 'sig' };
    const record: SigningKeyRecord = {
      kid,
      alg: algorithm,
      privateJwk: { ...(await exportJWK(privateKey)), ...meta },
      publicJwk: { ...(await exportJWK(publicKey)), ...meta },
      createdAt: new Date(now()).toISOString(),
    };
    await storage.saveSigningKey(record);
    records = [...records.filter((r) => r.kid !== kid), record];
    return record;
  }

  function importKey(
    cache: Map<string, Promise<CryptoKey>>,
    record: SigningKeyRecord,
    jwk: Record<string, unknown>,
  ) {
    let key = cache.get(record.kid);
    if (!key) {
      key = importJWK(jwk as JWK, record.alg).then((k) => k as CryptoKey);
      // A malformed stored key must not stay cached as a rejection.
      key.catch(() => cache.delete(record.kid));
      cache.set(record.kid, key);
    }
    return key;
  }

  return {
    async current() {
      await fresh();
      let record = newest();
      if (!record) {
        generating ??= generate().finally(() => {
          generating = undefined;
        });
        record = await generating;
      }
      return {
        kid: record.kid,
        alg: record.alg as SigningAlgorithm,
        privateKey: await importKey(privateKeys, record, record.privateJwk),
      };
    },

    async resolve(kid) {
      await fresh();
      let record = records.find((r) => r.kid === kid);
      if (!record) {
        await load();
        record = records.find((r) => r.kid === kid);
      }
      if (!record || !isAlgorithm(record.alg) || !usable(record)) return undefined;
      try {
        return { kid, alg: record.alg, publicKey: await importKey(publicKeys, record, record.publicJwk) };
      } catch {
        return undefined;
      }
    },

    async jwks() {
      await fresh();
      return {
        keys: records.filter((r) => isAlgorithm(r.alg) && usable(r)).map((r) => ({ ...r.publicJwk })),
      };
    },

    async rotate() {
      await load();
      // Generate first, so a concurrent `current()` never finds no signing key and makes its own.
      const created = await generate();
      const at = now();
      const retiredAt = new Date(at).toISOString();
      const expiresAt = new Date(at + retention * 1000).toISOString();
      for (const old of records.filter((r) => signing(r) && r.kid !== created.kid)) {
        const retired = {
          ...old,
          retiredAt,
          expiresAt: old.expiresAt && old.expiresAt < expiresAt ? old.expiresAt : expiresAt,
        };
        await storage.saveSigningKey(retired);
        records = records.map((r) => (r.kid === old.kid ? retired : r));
      }
      return created;
    },
  };
}
