import { optionError } from '../../common/options.js';
import { concurrencyGate, GateFullError, type ConcurrencyGate } from './concurrency-gate.js';
import { FailureCounters, adoptSharedCounts, blockedMs, type HeldCounter } from './failure-counters.js';
import { PlatformError } from '../../errors.js';
import type { FailureCountStore } from '../../storage/types.js';

/**
 * Limits on failed client authentications (`tokenRouter({ rateLimit })`, `bearerAuth({ rateLimit })`
 * for HTTP Basic). Failures are counted per remote address, and secret failures also per client id
 * *and* address, so nobody can lock a client out from another address. A valid credential from an
 * address that has not failed is never refused (see docs/auth.md).
 */
export interface FailureLimitOptions {
  /**
   * Failed client-secret checks allowed for one client id from one address within `windowSeconds`;
   * then that client id is refused from that address (429) until the window ends. `private_key_jwt`
   * attempts are not counted here, only per address.
   * @default 10
   */
  maxFailuresPerClientAddress?: number;
  /**
   * Failed authentications of any kind allowed per remote address within `windowSeconds`; then
   * every authentication from that address is refused (429) until the window ends.
   * @default 30
   */
  maxFailuresPerAddress?: number;
  /**
   * Length of the counting window, seconds; it starts at the first failure counted.
   * @default 300
   */
  windowSeconds?: number;
  /**
   * Client-secret checks (scrypt, ~16 MiB and tens of ms of CPU each) running at once, per router.
   * @default 4
   */
  maxConcurrentSecretChecks?: number;
  /**
   * Secret checks waiting for a free slot, per router; one more is answered 503 at once.
   * @default 64
   */
  maxQueuedSecretChecks?: number;
}

/** Why the limiter refused a request: over a failure limit (429), or too many secret checks queued (503). */
export type FailureLimitReason = 'too-many-failures' | 'busy';

/**
 * A refusal by the failure limiter; each router renders it in its own protocol, with `Retry-After`.
 * Its code is `ERR_TOO_MANY_FAILURES` (429) or, when busy, `ERR_SECRET_CHECKS_BUSY` (503).
 */
export class FailureLimitError extends PlatformError {
  declare readonly code: 'ERR_TOO_MANY_FAILURES' | 'ERR_SECRET_CHECKS_BUSY';
  readonly reason: FailureLimitReason;
  /** Seconds until a new attempt may succeed (`Retry-After`). */
  readonly retryAfterSeconds: number;
  constructor(reason: FailureLimitReason, retryAfterMs: number) {
    super(
      reason === 'busy' ? 'ERR_SECRET_CHECKS_BUSY' : 'ERR_TOO_MANY_FAILURES',
      reason === 'busy'
        ? 'Too many client secret checks in progress; try again shortly'
        : 'Too many failed authentications; try again later',
    );
    this.reason = reason;
    this.retryAfterSeconds = Math.max(1, Math.ceil(retryAfterMs / 1000));
  }
}

/** An authentication attempt admitted by `FailureLimiter.begin`. */
export interface FailureLimitAttempt {
  /**
   * Ends the attempt: a failure is counted; anything else (success, or an error that is no
   * authentication failure) gives its place back. Only the first call counts. Resolves once a
   * failure is counted (in the store's shared counters, when the limiter uses them).
   */
  end(failed: boolean): Promise<void>;
}

/**
 * Counts failed client authentications: in memory (one counter set per router), or in the
 * store's shared counters (`Storage.failureCounts`, one counter set per kind of router for every
 * instance on the store). Checking and counting are one step: an attempt holds a place in its
 * counters while it is checked, so parallel attempts cannot pass the limit; when the only places
 * left are held by attempts still being checked, a new attempt waits for them instead of being
 * refused. Successes never count. With shared counters, the places of attempts being checked are
 * held in each process: parallel attempts on several instances can each take the last place.
 */
export interface FailureLimiter {
  /**
   * Admits an attempt from `address`, counted per address, and per client id and address when
   * `clientId` is given (client secrets). Rejects with `FailureLimitError` ('too-many-failures')
   * when a limit is reached.
   */
  begin(address: string, clientId?: string): Promise<FailureLimitAttempt>;
  /**
   * Counts a failure that had no usable credentials (so no attempt was begun) against `address`.
   * Rejects with `FailureLimitError` ('too-many-failures') instead when the address is already over
   * its limit.
   */
  recordFailure(address: string): Promise<void>;
  /**
   * Runs a client-secret check within the concurrency cap; rejects with `FailureLimitError`
   * ('busy') at once when the cap and the queue are full.
   */
  checkSecret(check: () => Promise<boolean>): Promise<boolean>;
}

/** `FailureLimitOptions` with every default applied. */
export type ResolvedFailureLimitOptions = Required<FailureLimitOptions>;

export const DEFAULT_FAILURE_LIMITS: Readonly<ResolvedFailureLimitOptions> = Object.freeze({
  maxFailuresPerClientAddress: 10,
  maxFailuresPerAddress: 30,
  windowSeconds: 300,
  maxConcurrentSecretChecks: 4,
  maxQueuedSecretChecks: 64,
});

/** Applies defaults and validates; `owner` prefixes the `InvalidOptionError` messages. */
export function resolveFailureLimitOptions(
  options: FailureLimitOptions,
  owner = 'rateLimit',
): ResolvedFailureLimitOptions {
  if (typeof options !== 'object' || options === null) {
    optionError(owner, 'rateLimit', 'rateLimit must be an options object or false');
  }
  if ('maxFailuresPerClient' in options) {
    optionError(
      owner,
      'rateLimit.maxFailuresPerClient',
      'rateLimit.maxFailuresPerClient is replaced by maxFailuresPerClientAddress ' +
        '(failures are counted per client id and address)',
    );
  }
  const resolved = { ...DEFAULT_FAILURE_LIMITS };
  for (const name of Object.keys(DEFAULT_FAILURE_LIMITS) as (keyof ResolvedFailureLimitOptions)[]) {
    const value = options[name];
    if (value === undefined) continue;
    const least = name === 'maxQueuedSecretChecks' ? 0 : 1;
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < least) {
      optionError(
        owner,
        `rateLimit.${name}`,
        `rateLimit.${name} must be ${least === 0 ? 'a non-negative' : 'a positive'} integer`,
      );
    }
    resolved[name] = value;
  }
  return resolved;
}

const UNLIMITED: FailureLimiter = {
  begin: () => Promise.resolve({ end: () => Promise.resolve() }),
  recordFailure: () => Promise.resolve(),
  checkSecret: (check) => check(),
};

/** Where and how a failure limiter counts. */
export interface FailureLimiterContext {
  /** Prefix of option error messages, and the counter set in `shared` (`tokenRouter`, `bearerAuth`). */
  owner?: string;
  /** Clock (epoch ms) of the in-memory counters. */
  now?: () => number;
  /** Counters shared by every instance (`Storage.failureCounts`); without them, counts stay in memory. */
  shared?: FailureCountStore;
}

/** The shared counters' keys of `address` (and of `clientId` from it), in `FailureCounters.hold`'s order. */
function sharedKeys(prefix: string, address: string, clientId: string | undefined): string[] {
  const keys = [`${prefix}${address}`];
  if (clientId !== undefined) keys.push(`${prefix}${address}\n${clientId}`);
  return keys;
}

/** Runs a secret check within the gate; a full gate is a `FailureLimitError` ('busy'). */
async function gated(gate: ConcurrencyGate, check: () => Promise<boolean>): Promise<boolean> {
  try {
    return await gate.run(check);
  } catch (error) {
    if (error instanceof GateFullError) throw new FailureLimitError('busy', 1000);
    throw error;
  }
}

/** Creates a failure limiter; `false` disables limiting and the secret-check cap. */
export function failureLimiter(
  options: FailureLimitOptions | false = {},
  context: FailureLimiterContext = {},
): FailureLimiter {
  if (options === false) return UNLIMITED;
  const limits = resolveFailureLimitOptions(options, context.owner);
  const now = context.now ?? Date.now;
  const { shared } = context;
  const sharedPrefix = `${context.owner ?? 'rateLimit'}\n`;
  const windowMs = limits.windowSeconds * 1000;
  const counters = new FailureCounters({ ...limits, windowMs });
  const gate = concurrencyGate(limits.maxConcurrentSecretChecks, limits.maxQueuedSecretChecks);

  /** The counters of an attempt, with the shared counts taken in, and the time they were taken. */
  async function held(
    address: string,
    clientId: string | undefined,
    keys: string[],
  ): Promise<{ taken: HeldCounter[]; time: number }> {
    // Read before taking the counters: nothing may drop them between taking and holding.
    const counts = shared ? await shared.get(keys) : undefined;
    const time = now();
    const taken = counters.hold(address, clientId, time);
    if (counts) adoptSharedCounts(taken, counts, time);
    return { taken, time };
  }

  function attempt(taken: HeldCounter[], keys: string[]): FailureLimitAttempt {
    let ended = false;
    return {
      async end(failed) {
        if (ended) return;
        ended = true;
        try {
          // The place stays held until the shared count includes this failure.
          if (failed && shared) await shared.add(keys, windowMs);
        } finally {
          const time = now();
          for (const h of taken) {
            h.counter.pending -= 1;
            if (failed) counters.countFailure(h.counter, time);
            const waiters = h.counter.waiters;
            h.counter.waiters = [];
            for (const wake of waiters) wake();
            counters.dropIfIdle(h, time);
          }
        }
      },
    };
  }

  return {
    async begin(address, clientId) {
      const keys = sharedKeys(sharedPrefix, address, clientId);
      for (;;) {
        const { taken, time } = await held(address, clientId, keys);
        const wait = Math.max(...taken.map((h) => blockedMs(h, time)));
        if (wait > 0) {
          for (const h of taken) counters.dropIfIdle(h, time);
          throw new FailureLimitError('too-many-failures', wait);
        }
        // Places held by attempts still being checked: wait for one to end, then look again.
        const full = taken.find((h) => h.counter.failures + h.counter.pending >= h.max);
        if (!full) {
          for (const h of taken) h.counter.pending += 1;
          return attempt(taken, keys);
        }
        await new Promise<void>((resolve) => full.counter.waiters.push(resolve));
      }
    },

    async recordFailure(address) {
      const keys = sharedKeys(sharedPrefix, address, undefined);
      const { taken, time } = await held(address, undefined, keys);
      const own = taken[0]!;
      const wait = blockedMs(own, time);
      if (wait > 0) {
        counters.dropIfIdle(own, time);
        throw new FailureLimitError('too-many-failures', wait);
      }
      counters.countFailure(own.counter, time);
      if (shared) await shared.add(keys, windowMs);
    },

    checkSecret: (check) => gated(gate, check),
  };
}
