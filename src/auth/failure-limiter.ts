import { RateLimiterMemory, type RateLimiterRes } from 'rate-limiter-flexible';

export interface FailureLimitOptions {
  /**
   * Failed authentications allowed per client id within `windowSeconds`; then that client id is
   * refused until the window ends. Successful authentications never count.
   * @default 10
   */
  maxFailuresPerClient?: number;
  /**
   * Failed authentications allowed per remote address within `windowSeconds`.
   * @default 30
   */
  maxFailuresPerAddress?: number;
  /**
   * Length of the counting window, seconds.
   * @default 300
   */
  windowSeconds?: number;
}

/**
 * Counts failed client authentications per client id and per address, in memory (one counter set
 * per mount). Only failures are counted, so a legitimate client fetching many tokens quickly is
 * never slowed down.
 */
export interface FailureLimiter {
  /** Milliseconds until the caller may try again, or 0 when it is not blocked. */
  blockedFor(clientId: string | undefined, address: string): Promise<number>;
  /** Records a failed authentication. */
  recordFailure(clientId: string | undefined, address: string): Promise<void>;
}

function remainingBlock(res: RateLimiterRes | null, max: number): number {
  return res && res.consumedPoints >= max ? Math.max(1, res.msBeforeNext) : 0;
}

/** Creates a failure limiter; `false` disables limiting. */
export function failureLimiter(options: FailureLimitOptions | false = {}): FailureLimiter {
  if (options === false) {
    return { blockedFor: () => Promise.resolve(0), recordFailure: () => Promise.resolve() };
  }
  const perClient = options.maxFailuresPerClient ?? 10;
  const perAddress = options.maxFailuresPerAddress ?? 30;
  const duration = options.windowSeconds ?? 300;
  for (const [name, value] of Object.entries({ perClient, perAddress, duration })) {
    if (!Number.isInteger(value) || value < 1)
      throw new TypeError(`rateLimit: ${name} must be a positive integer`);
  }
  const clients = new RateLimiterMemory({ points: perClient, duration, keyPrefix: 'client' });
  const addresses = new RateLimiterMemory({ points: perAddress, duration, keyPrefix: 'address' });

  return {
    async blockedFor(clientId, address) {
      const [byClient, byAddress] = await Promise.all([
        clientId === undefined ? null : clients.get(clientId),
        addresses.get(address),
      ]);
      return Math.max(remainingBlock(byClient, perClient), remainingBlock(byAddress, perAddress));
    },
    async recordFailure(clientId, address) {
      // consume() rejects once the limit is passed; the count is kept all the same.
      const ignore = () => undefined;
      await Promise.all([
        clientId === undefined ? undefined : clients.consume(clientId).catch(ignore),
        addresses.consume(address).catch(ignore),
      ]);
    },
  };
}
