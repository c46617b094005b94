import express, { type RequestHandler } from 'express';
import { HttpError } from './http-error.js';
import { DEFAULT_MAX_JSON_DEPTH, jsonNestingExceeds } from './json-depth.js';

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

/** The body's text as the characters the JSON parser will see, for the depth scan. */
function scanTarget(buf: Buffer, encoding: string): string | Uint8Array {
  if (encoding === 'utf-8' || encoding === 'utf8') return buf;
  try {
    return new TextDecoder(encoding).decode(buf);
  } catch (cause) {
    throw new HttpError(415, 'ERR_UNSUPPORTED_ENCODING', 'Unsupported body encoding or charset', { cause });
  }
}

/**
 * Parses a JSON body of one of `types`; a body of another media type answers 415, a malformed one
 * 400, one nested deeper than `maxDepth` 400 (`ERR_JSON_TOO_DEEP`, checked on the raw text before
 * parsing), an oversized one 413 (rendered by the router's error handler). Requests without a body
 * pass through with `req.body` undefined.
 */
export function jsonBody(options: JsonBodyOptions): RequestHandler {
  const types = options.types.map((t) => t.toLowerCase());
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_JSON_DEPTH;
  const parser = express.json({
    limit: options.limit ?? '1mb',
    type: () => true,
    strict: false,
    // Runs on the whole raw body before JSON.parse; a throw ends parsing with that error.
    verify: (_req, _res, buf, encoding) => {
      if (jsonNestingExceeds(scanTarget(buf, encoding.toLowerCase()), maxDepth)) throw jsonTooDeep(maxDepth);
    },
  });
  return (req, res, next) => {
    const length = req.headers['content-length'];
    const hasBody =
      req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    if (!hasBody) return next();
    const contentType = (req.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    if (!types.includes(contentType)) {
      return next(
        new HttpError(415, 'ERR_UNSUPPORTED_MEDIA_TYPE', `Content-Type must be one of: ${types.join(', ')}`),
      );
    }
    parser(req, res, next);
  };
}
