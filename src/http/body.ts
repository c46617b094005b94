import express, { type RequestHandler } from 'express';
import { HttpError } from './http-error.js';

export interface JsonBodyOptions {
  /** Media types accepted (without parameters). */
  types: string[];
  /** Maximum body size, bytes or a size string. @default '1mb' */
  limit?: number | string;
}

/**
 * Parses a JSON body of one of `types`; a body of another media type answers 415, a malformed one
 * 400, an oversized one 413 (rendered by the router's error handler). Requests without a body
 * pass through with `req.body` undefined.
 */
export function jsonBody(options: JsonBodyOptions): RequestHandler {
  const types = options.types.map((t) => t.toLowerCase());
  const parser = express.json({ limit: options.limit ?? '1mb', type: () => true, strict: false });
  return (req, res, next) => {
    const length = req.headers['content-length'];
    const hasBody = req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
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
