/**
 * The HTTP client of `$import`: it reads another server's export manifest, its NDJSON files and its
 * token endpoint. A project's admin chooses these URLs, so every connection follows the outbound
 * policy of `jwks_uri` (src/auth/keys/public-address.ts): in production only public addresses,
 * checked on the URL and again at connect time; redirects are followed a few times, each hop
 * checked the same way, and the `Authorization` header is never sent to another origin. Sizes and
 * times are bounded: a JSON answer is read up to `maxJsonBytes`, a file body may not stall longer
 * than `idleTimeout`.
 */
import { request as httpRequest, Agent as HttpAgent, type IncomingMessage } from 'node:http';
import { request as httpsRequest, Agent as HttpsAgent } from 'node:https';
import type { LookupFunction } from 'node:net';
import type { Readable } from 'node:stream';
import { createGunzip } from 'node:zlib';
import { isPublicHostname, publicOnlyLookup } from '../../auth/keys/public-address.js';
import { DEFAULT_MAX_JSON_DEPTH, jsonNestingExceeds } from '../../http/json-depth.js';

/** Why a source request failed. */
export type SourceFetchFailure = 'address' | 'timeout' | 'too-large' | 'status' | 'invalid' | 'network';

/** A request to an import source that failed; `reason` says why, `status` the HTTP status when one came. */
export class SourceFetchError extends Error {
  readonly reason: SourceFetchFailure;
  readonly status: number | undefined;
  constructor(reason: SourceFetchFailure, message: string, options?: { cause?: unknown; status?: number }) {
    super(message, options);
    this.name = 'SourceFetchError';
    this.reason = reason;
    this.status = options?.status;
  }

  /** Whether trying again later may succeed (network, timeout, 429 and 5xx answers). */
  get transient(): boolean {
    if (this.reason === 'network' || this.reason === 'timeout') return true;
    return this.reason === 'status' && (this.status === 429 || (this.status ?? 0) >= 500);
  }
}

/** Limits of the import source client. */
export interface SourceFetchLimits {
  /** Milliseconds without any byte (connecting, waiting for headers or reading the body) before giving up. */
  idleTimeout: number;
  /** Most bytes of a JSON answer (a manifest, a token response). */
  maxJsonBytes: number;
  /** Connect to loopback, private and link-local addresses too. */
  allowPrivateAddresses: boolean;
  /** Most redirects followed per request. @default 5 */
  maxRedirects?: number;
}

/** One answer of a source, its body not read yet. */
export interface SourceResponse {
  status: number;
  headers: IncomingMessage['headers'];
  /** The body, decompressed when the source sent it gzip-coded. */
  body: Readable;
}

/** The requests `$import` makes. */
export interface SourceFetcher {
  /** GET `url`; any status is answered (the caller decides), after redirects. */
  get(url: URL, headers: Record<string, string>, signal?: AbortSignal): Promise<SourceResponse>;
  /** POST a form to `url` (a token endpoint), answers the parsed JSON of a 2xx or 4xx answer. */
  postForm(
    url: URL,
    form: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<{ status: number; body: unknown }>;
  /** Reads a JSON body, bounded by `maxJsonBytes`. */
  json(response: SourceResponse): Promise<unknown>;
  /** Whether `url` may be fetched at all (scheme and, unless allowed, a public host): a problem, or undefined. */
  urlProblem(url: string): string | undefined;
}

const REDIRECTS = new Set([301, 302, 303, 307, 308]);

/** Creates the client; `resolve` replaces `dns.lookup` (tests), the public check applies to its answers. */
export function sourceFetcher(limits: SourceFetchLimits, resolve?: LookupFunction): SourceFetcher {
  const lookup = limits.allowPrivateAddresses ? resolve : publicOnlyLookup(resolve);
  const agentOptions = { keepAlive: true, ...(lookup ? { lookup } : {}) };
  const http = new HttpAgent(agentOptions);
  const https = new HttpsAgent(agentOptions);
  const maxRedirects = limits.maxRedirects ?? 5;

  const urlProblem = (text: string): string | undefined => {
    let url: URL;
    try {
      url = new URL(text);
    } catch {
      return 'is not an absolute URL';
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') return 'must be an http or https URL';
    if (url.username || url.password) return 'must not carry credentials';
    if (!limits.allowPrivateAddresses && !isPublicHostname(url.hostname))
      return 'is not on a public address (allowed only by the private-address setting)';
    return undefined;
  };

  const send = (
    url: URL,
    method: 'GET' | 'POST',
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<IncomingMessage> =>
    new Promise((resolve, reject) => {
      const problem = urlProblem(url.href);
      if (problem) {
        reject(new SourceFetchError('address', `${url.origin} ${problem}`));
        return;
      }
      const secure = url.protocol === 'https:';
      const req = (secure ? httpsRequest : httpRequest)(url, {
        method,
        agent: secure ? https : http,
        headers,
        ...(signal ? { signal } : {}),
      });
      req.setTimeout(limits.idleTimeout, () => {
        req.destroy(
          new SourceFetchError('timeout', `${url.origin} sent nothing for ${limits.idleTimeout} ms`),
        );
      });
      req.on('error', (cause: Error & { code?: string }) => {
        if (cause instanceof SourceFetchError) reject(cause);
        else if (cause.code === 'ERR_NON_PUBLIC_ADDRESS')
          reject(new SourceFetchError('address', cause.message, { cause }));
        else if (cause.name === 'AbortError') reject(cause);
        else reject(new SourceFetchError('network', `${url.origin}: ${cause.message}`, { cause }));
      });
      req.on('response', resolve);
      req.end(body);
    });

  /** Sends, following redirects (each hop checked); `Authorization` only to the first origin. */
  const request = async (
    first: URL,
    method: 'GET' | 'POST',
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
  ): Promise<SourceResponse> => {
    let url = first;
    for (let hop = 0; ; hop++) {
      const sent = url.origin === first.origin ? headers : withoutAuthorization(headers);
      const res = await send(url, method, sent, body, signal);
      const location = res.headers.location;
      if (method === 'GET' && REDIRECTS.has(res.statusCode ?? 0) && location) {
        res.resume();
        if (hop >= maxRedirects)
          throw new SourceFetchError('status', `${first.origin} redirected more than ${maxRedirects} times`);
        url = new URL(location, url);
        continue;
      }
      // An idle timer on the body too: a source that stops sending mid-file must not hold the job.
      res.setTimeout(limits.idleTimeout, () => {
        res.destroy(
          new SourceFetchError('timeout', `${url.origin} stopped sending for ${limits.idleTimeout} ms`),
        );
      });
      const coding = String(res.headers['content-encoding'] ?? '').toLowerCase();
      const decoded = coding === 'gzip' ? res.pipe(createGunzip()) : res;
      if (decoded !== res) res.on('error', (error) => decoded.destroy(error));
      return { status: res.statusCode ?? 0, headers: res.headers, body: decoded };
    }
  };

  const json = async (response: SourceResponse): Promise<unknown> => {
    const chunks: Buffer[] = [];
    let length = 0;
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      length += chunk.length;
      if (length > limits.maxJsonBytes) {
        response.body.destroy();
        throw new SourceFetchError('too-large', `The answer is larger than ${limits.maxJsonBytes} bytes`);
      }
      chunks.push(chunk);
    }
    const text = Buffer.concat(chunks, length).toString('utf8');
    if (jsonNestingExceeds(text, DEFAULT_MAX_JSON_DEPTH))
      throw new SourceFetchError('invalid', 'The answer nests JSON too deeply');
    try {
      return JSON.parse(text) as unknown;
    } catch (cause) {
      throw new SourceFetchError('invalid', 'The answer is not JSON', { cause, status: response.status });
    }
  };

  return {
    urlProblem,
    json,
    get: (url, headers, signal) =>
      request(url, 'GET', { 'accept-encoding': 'gzip', ...headers }, undefined, signal),
    async postForm(url, form, signal) {
      const body = new URLSearchParams(form).toString();
      const response = await request(
        url,
        'POST',
        {
          'content-type': 'application/x-www-form-urlencoded',
          accept: 'application/json',
          'content-length': String(Buffer.byteLength(body)),
        },
        body,
        signal,
      );
      return { status: response.status, body: await json(response) };
    },
  };
}

function withoutAuthorization(headers: Record<string, string>): Record<string, string> {
  const copy = { ...headers };
  for (const name of Object.keys(copy)) if (name.toLowerCase() === 'authorization') delete copy[name];
  return copy;
}
