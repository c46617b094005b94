import { STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { RequestHandler } from 'express';
import { errorFormatOf, type ErrorFormat, type ErrorPaths } from './error-paths.js';
import { renderError } from './error-rendering.js';
import { HttpError } from './http-error.js';
import { checkOptionKeys, type OptionKeys } from '../common/option-keys.js';
import { optionError } from '../common/options.js';

/**
 * Options of {@link protectServer}: connection limits (the timeouts in milliseconds) and which
 * paths answer SCIM or OAuth errors.
 */
export interface ServerLimits {
  /**
   * Time a client has to send the complete request headers (Node `server.headersTimeout`).
   * @default 20000
   */
  headersTimeout?: number;
  /**
   * Time a client has to send the complete request, body included (Node `server.requestTimeout`).
   * Raise it for very large NDJSON uploads over slow links.
   * @default 120000
   */
  requestTimeout?: number;
  /**
   * Time an idle keep-alive connection stays open after a response (Node `server.keepAliveTimeout`).
   * @default 5000
   */
  keepAliveTimeout?: number;
  /**
   * Open connections allowed from one client address; a connection over it is closed at once, so
   * a slow client (slowloris) opening many connections cannot take the server's sockets. Behind a
   * reverse proxy or load balancer every connection comes from the proxy's address: set it to
   * `Infinity` there and let the proxy limit clients. `Infinity` disables it.
   * @default 128
   */
  maxConnectionsPerAddress?: number;
  /**
   * Open connections allowed in all (Node `server.maxConnections`); over it, new connections are
   * closed at once. `Infinity` disables it.
   * @default 4096
   */
  maxConnections?: number;
  /**
   * Path prefixes whose refused requests are answered as SCIM or OAuth errors rather than
   * OperationOutcomes (see `ErrorPaths`), as the routers mounted there answer.
   * @default { scim: ['/scim/v2'], oauth: ['/oauth2/token', '/oauth2/jwks'] }
   */
  errorPaths?: ErrorPaths;
}

const SERVER_LIMIT_KEYS: OptionKeys<ServerLimits> = {
  headersTimeout: true,
  requestTimeout: true,
  keepAliveTimeout: true,
  maxConnectionsPerAddress: true,
  maxConnections: true,
  errorPaths: true,
};

/** How long a refused connection may still drain before it is destroyed. */
const CLOSE_GRACE_MS = 1000;

type TimeoutLimit = 'headersTimeout' | 'requestTimeout' | 'keepAliveTimeout';

const DEFAULT_LIMITS: Required<Pick<ServerLimits, TimeoutLimit>> = {
  headersTimeout: 20_000,
  requestTimeout: 120_000,
  keepAliveTimeout: 5_000,
};

/** The error Node's HTTP parser error stands for (Node answers these itself, with an empty body). */
function clientError(code: string | undefined): HttpError {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return new HttpError(431, 'ERR_HEADERS_TOO_LARGE', 'The request line or headers are too large');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new HttpError(408, 'ERR_REQUEST_TIMEOUT', 'The request did not arrive in time');
    default:
      return new HttpError(400, 'ERR_MALFORMED_REQUEST', 'Malformed HTTP request');
  }
}

/**
 * The target of the request Node's parser refused, when known: after its headers (a malformed
 * body, a body not complete in time), the request being read; before, its request line, when the
 * refused bytes begin with it (a request line and headers that arrived in one read, as a request
 * written at once does). Unknown otherwise: a request line cut across reads, headers not complete
 * in time.
 */
function refusedTarget(error: NodeJS.ErrnoException, socket: Duplex): string | undefined {
  // `parser` is Node's own (undocumented) property of a server socket.
  const incoming = (socket as { parser?: { incoming?: IncomingMessage | null } }).parser?.incoming;
  if (incoming && !incoming.complete) return incoming.url;
  const packet = (error as { rawPacket?: unknown }).rawPacket;
  if (!Buffer.isBuffer(packet)) return undefined;
  return /^[A-Za-z-]+ ([^\s]+)/.exec(packet.subarray(0, 16 * 1024).toString('latin1'))?.[1];
}

/** A complete HTTP/1.1 error response in `format`, written raw on a socket. */
function rawErrorResponse(error: HttpError, format: ErrorFormat): string {
  const { status, headers, body } = renderError(error, format);
  const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
    lines.join('') +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'Connection: close\r\n\r\n' +
    body
  );
}

/**
 * Hardens a Node HTTP server that mounts the platform: requests that Node's parser refuses before
 * Express sees them (a request line or headers over `--max-http-header-size` or the server's
 * `maxHeaderSize`, a byte not allowed in a URL, a request that does not arrive in time) are
 * answered with a JSON error body instead of an empty one or a reset connection: in the protocol
 * of the request's path (`errorPaths`: SCIM Error under the SCIM mount, OAuth error at the token
 * endpoint), an OperationOutcome elsewhere or when the path is not known; header, request and
 * keep-alive timeouts are set so an incomplete request cannot hold a connection for minutes.
 * Returns the server.
 */
export function protectServer<S extends Server>(server: S, limits: ServerLimits = {}): S {
  checkOptionKeys('protectServer', limits, SERVER_LIMIT_KEYS);
  const formatOf = errorFormatOf('protectServer', limits.errorPaths);
  const resolved = { ...DEFAULT_LIMITS };
  for (const key of Object.keys(DEFAULT_LIMITS) as TimeoutLimit[]) {
    const value = limits[key];
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value <= 0) {
      optionError('protectServer', key, `${key} must be a positive integer of milliseconds`);
    }
    resolved[key] = value;
  }
  const count = (key: 'maxConnectionsPerAddress' | 'maxConnections', fallback: number): number => {
    const value = limits[key] ?? fallback;
    if (value !== Number.POSITIVE_INFINITY && (!Number.isInteger(value) || value <= 0))
      optionError('protectServer', key, `${key} must be a positive integer or Infinity`);
    return value;
  };
  const perAddress = count('maxConnectionsPerAddress', 128);
  const total = count('maxConnections', 4096);
  if (Number.isFinite(total)) server.maxConnections = total;
  if (Number.isFinite(perAddress)) limitPerAddress(server, perAddress);
  // Node requires headersTimeout <= requestTimeout.
  server.requestTimeout = resolved.requestTimeout;
  server.headersTimeout = Math.min(resolved.headersTimeout, resolved.requestTimeout);
  server.keepAliveTimeout = resolved.keepAliveTimeout;
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    // The parser may report again while the connection closes; a reset peer wants no answer; an
    // answer already under way (a route that did not wait for the malformed body) is not followed
    // by another. (`_httpMessage` is Node's own: the response of the request being read.)
    const answering = (socket as { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (!socket.writable || error.code === 'ECONNRESET' || answering?.headersSent) {
      socket.destroy();
      return;
    }
    socket.end(rawErrorResponse(clientError(error.code), formatOf(refusedTarget(error, socket))));
    // Read and drop what the client still sends, so closing does not reset the connection before
    // it reads the answer; but a client that goes on sending (a slowloris) never closes its side:
    // the connection is destroyed a moment later whatever it does.
    socket.resume();
    setTimeout(() => socket.destroy(), CLOSE_GRACE_MS).unref();
  });
  return server;
}

/** Closes at once each connection that would put its address over `limit` open connections. */
function limitPerAddress(server: Server, limit: number): void {
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress ?? '';
    const now = (open.get(address) ?? 0) + 1;
    if (now > limit) {
      socket.destroy();
      return;
    }
    open.set(address, now);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
    });
  });
}

/** Options of {@link notFoundHandler}. */
export interface NotFoundHandlerOptions {
  /**
   * Which paths answer SCIM or OAuth errors rather than OperationOutcomes.
   * @default { scim: ['/scim/v2'], oauth: ['/oauth2/token', '/oauth2/jwks'] }
   */
  errorPaths?: ErrorPaths;
}

const NOT_FOUND_KEYS: OptionKeys<NotFoundHandlerOptions> = { errorPaths: true };

/**
 * The last handler of a host app: any request no router answered gets a 404 JSON error instead of
 * Express's HTML page: an OperationOutcome (`application/fhir+json`), or a SCIM or OAuth error
 * under `errorPaths` (an unknown path under the token endpoint, a POST to the JWKS).
 */
export function notFoundHandler(options: NotFoundHandlerOptions = {}): RequestHandler {
  checkOptionKeys('notFoundHandler', options, NOT_FOUND_KEYS);
  const formatOf = errorFormatOf('notFoundHandler', options.errorPaths);
  return (req, res) => {
    const error = new HttpError(404, 'ERR_NOT_FOUND', `No route answers ${req.method} ${req.path}`);
    const { status, headers, body } = renderError(error, formatOf(req.originalUrl));
    res.status(status).set(headers).send(body);
  };
}
