import { isAscii } from 'node:buffer';
import express, { type Request, type RequestHandler } from 'express';
import { HttpError, unsupportedEncoding } from './http-error.js';
import { DEFAULT_MAX_JSON_DEPTH, valueNestingExceeds } from './json-depth.js';

export interface JsonBodyOptions {
  /** Media types accepted (without parameters). */
  types: string[];
  /** Maximum body size, bytes or a size string. @default '1mb' */
  limit?: number | string;
  /** Deepest nesting of objects and arrays accepted (400 `ERR_JSON_TOO_DEEP` above). @default 100 */
  maxDepth?: number;
}

/** The 400 answered for JSON nested deeper than the limit (rendered by each router in its protocol). */
export function jsonTooDeep(maxDepth: number): HttpError {
  return new HttpError(
    400,
    'ERR_JSON_TOO_DEEP',
    `JSON nesting deeper than ${maxDepth} levels is not accepted`,
  );
}

/**
 * A Content-Type header's media type and `charset` parameter, both lower-cased (`type` empty and
 * `charset` `utf-8` when absent).
 */
export function contentTypeOf(header: string | undefined): { type: string; charset: string } {
  const value = header ?? '';
  const m = /;\s*charset\s*=\s*"?([^";\s]+)"?/i.exec(value);
  return { type: value.split(';')[0]!.trim().toLowerCase(), charset: m ? m[1]!.toLowerCase() : 'utf-8' };
}

/**
 * The body's text. UTF-8 that is all ASCII (most FHIR and SCIM JSON) is decoded as Latin-1, which
 * gives the same characters about a quarter faster than the UTF-8 decoder; a UTF-8 byte order mark
 * is dropped, as JSON parsers do. Other `utf-*` charsets go through `TextDecoder` (415 when it does
 * not know them).
 */
function decodeBody(buf: Buffer, charset: string): string {
  if (charset === 'utf-8') {
    if (isAscii(buf)) return buf.toString('latin1');
    const text = buf.toString('utf8');
    return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  }
  try {
    return new TextDecoder(charset).decode(buf);
  } catch (cause) {
    throw unsupportedEncoding(cause);
  }
}

/** A body that is not JSON: typed like body-parser's own failure, which the routers render. */
class BodyParseError extends SyntaxError {
  readonly type = 'entity.parse.failed';
  readonly status = 400;
  readonly expose = true;
}

/**
 * Parses a JSON body of one of `types`; a body of another media type answers 415, a charset other
 * than `utf-*` 415, a malformed one 400, one nested deeper than `maxDepth` 400 (`ERR_JSON_TOO_DEEP`,
 * checked on the parsed value before any other code walks it), an oversized one 413 (rendered by the router's error
 * handler). Requests without a body pass through with `req.body` undefined. The bytes are read
 * (and inflated) by body-parser's raw reader, which also enforces the limit; decoding and parsing
 * are done here, once, on the whole body.
 */
export function jsonBody(options: JsonBodyOptions): RequestHandler {
  const types = options.types.map((t) => t.toLowerCase());
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_JSON_DEPTH;
  const reader = express.raw({ limit: options.limit ?? '1mb', type: () => true });
  const parse = (req: Request, charset: string): void => {
    const buf = req.body as unknown;
    if (!Buffer.isBuffer(buf)) return;
    const text = decodeBody(buf, charset);
    if (text.length === 0) {
      // An empty body (a chunked request that sent nothing) reads as an empty object, as before.
      req.body = {};
      return;
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new BodyParseError((error as Error).message, { cause: error });
    }
    if (valueNestingExceeds(value, maxDepth)) throw jsonTooDeep(maxDepth);
    req.body = value;
  };
  return (req, res, next) => {
    const length = req.headers['content-length'];
    const hasBody =
      req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    if (!hasBody) return next();
    const { type, charset } = contentTypeOf(req.headers['content-type']);
    if (!types.includes(type)) {
      return next(
        new HttpError(415, 'ERR_UNSUPPORTED_MEDIA_TYPE', `Content-Type must be one of: ${types.join(', ')}`),
      );
    }
    if (!charset.startsWith('utf-')) return next(unsupportedEncoding());
    reader(req, res, (error?: unknown) => {
      if (error !== undefined) return next(error);
      try {
        parse(req, charset);
      } catch (failure) {
        return next(failure);
      }
      next();
    });
  };
}
