import { STATUS_CODES, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import type { RequestHandler } from 'express';
import { operationOutcome } from './error-rendering.js';
import { optionError } from './options.js';

/** Connection limits of {@link protectServer}; every value is in milliseconds. */
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
}

const DEFAULT_LIMITS: Required<ServerLimits> = {
  headersTimeout: 20_000,
  requestTimeout: 120_000,
  keepAliveTimeout: 5_000,
};

/** The status Node's HTTP parser error stands for (Node answers these itself, with an empty body). */
function clientErrorStatus(code: string | undefined): number {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return 431;
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return 408;
    default:
      return 400;
  }
}

/** A complete HTTP/1.1 response with an OperationOutcome body, written raw on a socket. */
function rawJsonResponse(status: number, text: string): string {
  const body = JSON.stringify(operationOutcome('error', status === 408 ? 'timeout' : 'structure', text));
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
    'Content-Type: application/fhir+json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    'Connection: close\r\n\r\n' +
    body
  );
}

/**
 * Hardens a Node HTTP server that mounts the platform: requests that Node's parser refuses before
 * Express sees them (a request line or headers over `--max-http-header-size`, a byte not allowed
 * in a URL, a request that does not arrive in time) are answered with an OperationOutcome JSON body
 * instead of an empty one or a reset connection; header, request and keep-alive timeouts are set
 * so an incomplete request cannot hold a connection for minutes. Returns the server.
 */
export function protectServer<S extends Server>(server: S, limits: ServerLimits = {}): S {
  const resolved = { ...DEFAULT_LIMITS };
  for (const key of Object.keys(DEFAULT_LIMITS) as (keyof ServerLimits)[]) {
    const value = limits[key];
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value <= 0) {
      optionError('protectServer', key, `${key} must be a positive integer of milliseconds`);
    }
    resolved[key] = value;
  }
  // Node requires headersTimeout <= requestTimeout.
  server.requestTimeout = resolved.requestTimeout;
  server.headersTimeout = Math.min(resolved.headersTimeout, resolved.requestTimeout);
  server.keepAliveTimeout = resolved.keepAliveTimeout;
  server.on('clientError', (error: NodeJS.ErrnoException, socket: Duplex) => {
    // The parser may report again while the connection closes; a reset peer wants no answer.
    if (!socket.writable || error.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const status = clientErrorStatus(error.code);
    const text =
      status === 431
        ? 'The request line or headers are too large'
        : status === 408
          ? 'The request did not arrive in time'
          : 'Malformed HTTP request';
    socket.end(rawJsonResponse(status, text));
    // Read and drop what the client still sends, so closing does not reset the connection before
    // it reads the answer.
    socket.resume();
  });
  return server;
}

/**
 * The last handler of a host app: any request no router answered gets a 404 OperationOutcome
 * (`application/fhir+json`) instead of Express's HTML page.
 */
export function notFoundHandler(): RequestHandler {
  return (req, res) => {
    res
      .status(404)
      .type('application/fhir+json')
      .json(operationOutcome('error', 'not-found', `No route answers ${req.method} ${req.path}`));
  };
}
