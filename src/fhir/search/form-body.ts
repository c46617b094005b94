import express, { type RequestHandler } from 'express';
import { contentTypeOf } from '../../http/body.js';
import { HttpError, unsupportedEncoding } from '../../http/http-error.js';

const FORM = 'application/x-www-form-urlencoded';

/**
 * Reads the `application/x-www-form-urlencoded` body of `POST [type]/_search` into `req.body` as
 * `URLSearchParams` (order and repeats kept, as in a query string); no body gives empty ones.
 * Another media type answers 415, a charset other than UTF-8 415, a body over `limit` 413.
 * @see https://hl7.org/fhir/R4/http.html#search
 */
export function formBody(limit: number | string): RequestHandler {
  const reader = express.raw({ limit, type: () => true });
  return (req, res, next) => {
    const length = req.headers['content-length'];
    const hasBody =
      req.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
    if (!hasBody) {
      req.body = new URLSearchParams();
      return next();
    }
    const { type, charset } = contentTypeOf(req.headers['content-type']);
    if (type !== FORM) {
      return next(new HttpError(415, 'ERR_UNSUPPORTED_MEDIA_TYPE', `Content-Type must be ${FORM}`));
    }
    if (charset !== 'utf-8' && charset !== 'utf8') return next(unsupportedEncoding());
    reader(req, res, (error?: unknown) => {
      if (error !== undefined) return next(error);
      const buf = req.body as unknown;
      req.body = new URLSearchParams(Buffer.isBuffer(buf) ? buf.toString('utf8') : '');
      next();
    });
  };
}
