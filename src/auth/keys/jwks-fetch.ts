/**
 * Fetching one client's `jwks_uri`, bounded: a JWKS is a few kilobytes, so the answer is read as
 * a stream and the request aborted as soon as it passes `maxBytes` or `timeout` (a 300 MB JWKS
 * would otherwise be read and parsed whole), and the connection is made only to public addresses
 * unless private ones are allowed.
 */
import { request as httpRequest, Agent as HttpAgent, type IncomingMessage } from 'node:http';
import { request as httpsRequest, Agent as HttpsAgent } from 'node:https';
import type { LookupFunction } from 'node:net';
import { DEFAULT_MAX_JSON_DEPTH, jsonNestingExceeds } from '../../http/json-depth.js';
import { isPublicHostname, publicOnlyLookup } from './public-address.js';

/** Why a `jwks_uri` gave no key set. */
export type JwksFetchFailure = 'address' | 'timeout' | 'too-large' | 'status' | 'invalid' | 'network';

/** A `jwks_uri` fetch that failed; `reason` says why. Mapped to `invalid_client` by the token endpoint. */
export class JwksFetchError extends Error {
  readonly reason: JwksFetchFailure;
  constructor(reason: JwksFetchFailure, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'JwksFetchError';
    this.reason = reason;
  }
}

/** Limits of one fetch. */
export interface JwksFetchLimits {
  /** Milliseconds for the whole fetch: connection, headers and body. */
  timeout: number;
  /** Most bytes of body read. */
  maxBytes: number;
  /** Connect to loopback, private and link-local addresses too. */
  allowPrivateAddresses: boolean;
}

/** A fetcher of JWKS documents with its own agents (its sockets are never shared with the host's). */
export interface JwksFetcher {
  /** The parsed JSON document at `url`. Throws `JwksFetchError`. */
  fetch(url: URL): Promise<unknown>;
}

/**
 * Creates a fetcher. `resolve` replaces `dns.lookup` (tests); the public-address check applies to
 * whatever it answers.
 */
export function jwksFetcher(limits: JwksFetchLimits, resolve?: LookupFunction): JwksFetcher {
  // Our own agents, without keep-alive: a socket the host's code opened to some internal address
  // is never reused, and every connection goes through our lookup.
  const lookup = limits.allowPrivateAddresses ? resolve : publicOnlyLookup(resolve);
  const agentOptions = lookup ? { lookup } : {};
  const http = new HttpAgent(agentOptions);
  const https = new HttpsAgent(agentOptions);
  return {
    fetch: (url) => fetchJwks(url, limits, url.protocol === 'https:' ? https : http),
  };
}

function fetchJwks(url: URL, limits: JwksFetchLimits, agent: HttpAgent): Promise<unknown> {
  return new Promise((resolve, reject) => {
    // Node makes no lookup for an IP literal, so the agent's check never sees those.
    if (!limits.allowPrivateAddresses && !isPublicHostname(url.hostname)) {
      reject(new JwksFetchError('address', `${url.hostname} is not a public address`));
      return;
    }
    let settled = false;
    const finish = (error: JwksFetchError | undefined, value?: unknown) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (error) {
        req.destroy();
        reject(error);
      } else resolve(value);
    };
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    const req = send(url, {
      method: 'GET',
      agent,
      headers: { accept: 'application/json, application/jwk-set+json' },
    });
    const timer = setTimeout(
      () => finish(new JwksFetchError('timeout', `No JWKS from ${url.origin} within ${limits.timeout} ms`)),
      limits.timeout,
    );
    timer.unref();
    req.on('error', (cause: Error & { code?: string }) => {
      const reason = cause.code === 'ERR_NON_PUBLIC_ADDRESS' ? 'address' : 'network';
      finish(new JwksFetchError(reason, `Fetching the JWKS failed: ${cause.message}`, { cause }));
    });
    req.on('response', (res: IncomingMessage) => {
      // Redirects are not followed: a 3xx could lead anywhere.
      if (res.statusCode !== 200) {
        finish(new JwksFetchError('status', `The JWKS answered ${res.statusCode ?? '?'}, not 200`));
        return;
      }
      const declared = Number(res.headers['content-length']);
      if (declared > limits.maxBytes) {
        finish(tooLarge(limits.maxBytes));
        return;
      }
      const chunks: Buffer[] = [];
      let length = 0;
      res.on('data', (chunk: Buffer) => {
        length += chunk.length;
        if (length > limits.maxBytes) finish(tooLarge(limits.maxBytes));
        else chunks.push(chunk);
      });
      res.on('error', (cause) => finish(new JwksFetchError('network', 'Reading the JWKS failed', { cause })));
      res.on('end', () => {
        try {
          finish(undefined, parseJson(Buffer.concat(chunks, length).toString('utf8')));
        } catch (error) {
          finish(error as JwksFetchError);
        }
      });
    });
    req.end();
  });
}

function tooLarge(maxBytes: number): JwksFetchError {
  return new JwksFetchError('too-large', `The JWKS is larger than ${maxBytes} bytes`);
}

function parseJson(text: string): unknown {
  if (jsonNestingExceeds(text, DEFAULT_MAX_JSON_DEPTH))
    throw new JwksFetchError('invalid', 'The JWKS nests too deeply');
  try {
    return JSON.parse(text) as unknown;
  } catch (cause) {
    throw new JwksFetchError('invalid', 'The JWKS is not JSON', { cause });
  }
}
