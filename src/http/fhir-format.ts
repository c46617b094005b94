import type { Request, RequestHandler } from 'express';
import { FhirError } from './http-error.js';

/*
 * The server speaks FHIR JSON only. A client that asks for nothing but XML (or another format) is
 * told so with 406 rather than given JSON it did not ask for.
 */

/** `_format` values that mean FHIR JSON (lower-cased, without parameters). */
const JSON_FORMATS = new Set(['json', 'application/fhir+json', 'application/json', 'application/json+fhir']);

/** `Accept` media ranges that a FHIR JSON answer satisfies. */
const JSON_RANGES = new Set([
  'application/fhir+json',
  'application/json',
  'application/json+fhir',
  'application/*',
  '*/*',
]);

/**
 * A media type or `_format` value as compared: lower-cased, without parameters, and with a space
 * read as `+` (`_format=application/fhir+json` unescaped in a query string decodes to a space).
 */
function mediaTypeOf(value: string): string {
  return value.split(';')[0]!.trim().toLowerCase().replace(/\s+/g, '+');
}

/** The `q` weight of a media range (1 without one, or with one that does not parse). */
function weightOf(range: string): number {
  const m = /;\s*q\s*=\s*([^;\s]*)/i.exec(range);
  if (!m) return 1;
  const q = Number(m[1]);
  return Number.isFinite(q) ? q : 1;
}

/**
 * True when an `Accept` header lets the server answer FHIR JSON: absent or empty, or one of its
 * media ranges is a JSON type, `application/*` or `*\/*` with a weight above 0.
 * @see https://www.rfc-editor.org/rfc/rfc9110#section-12.5.1
 */
export function acceptsFhirJson(accept: string | undefined): boolean {
  if (accept === undefined || accept.trim() === '') return true;
  return accept.split(',').some((range) => JSON_RANGES.has(mediaTypeOf(range)) && weightOf(range) > 0);
}

/** True when a `_format` value means FHIR JSON (`json`, `application/fhir+json`, …; any case, parameters allowed). */
export function isJsonFormat(format: string): boolean {
  return JSON_FORMATS.has(mediaTypeOf(format));
}

/**
 * True when an `Accept` header accepts `mediaType` (`text/plain`; parameters ignored): the most
 * specific of its ranges that match it (`text/plain`, then `text/*`, then `*\/*`) has a weight
 * above 0. An absent or empty header accepts anything.
 * @see https://www.rfc-editor.org/rfc/rfc9110#section-12.5.1
 */
export function acceptsMediaType(accept: string | undefined, mediaType: string): boolean {
  if (accept === undefined || accept.trim() === '') return true;
  const wanted = mediaTypeOf(mediaType);
  const [major] = wanted.split('/');
  let best: { specificity: number; weight: number } | undefined;
  for (const range of accept.split(',')) {
    const type = mediaTypeOf(range);
    const specificity = type === wanted ? 2 : type === `${major}/*` ? 1 : type === '*/*' ? 0 : -1;
    if (specificity < 0 || (best && best.specificity >= specificity)) continue;
    best = { specificity, weight: weightOf(range) };
  }
  return best !== undefined && best.weight > 0;
}

/**
 * Throws 406 `not-supported` unless a FHIR JSON answer is acceptable: `_format` (every value given,
 * overriding `Accept`) must mean JSON, else `Accept` must accept it.
 * @see https://hl7.org/fhir/R4/http.html#mime-type
 */
export function checkFhirJsonWanted(formats: readonly string[], accept: string | undefined): void {
  if (formats.length > 0) {
    const other = formats.find((format) => !isJsonFormat(format));
    if (other !== undefined)
      throw new FhirError(
        406,
        'not-supported',
        `_format ${other} is not supported: this server answers JSON only`,
        {
          expression: ['_format'],
        },
      );
    return;
  }
  if (!acceptsFhirJson(accept))
    throw new FhirError(
      406,
      'not-supported',
      'The Accept header allows no JSON: this server answers JSON only',
    );
}

/** The `_format` values of a request's query string. */
export function formatsOf(req: Request): string[] {
  const at = req.originalUrl.indexOf('?');
  if (at === -1) return [];
  return new URLSearchParams(req.originalUrl.slice(at + 1)).getAll('_format');
}

/**
 * Middleware: a request that asks only for a format other than FHIR JSON (`_format=xml`,
 * `Accept: application/fhir+xml`) is answered 406 with an OperationOutcome, by the router's error
 * renderer (see {@link checkFhirJsonWanted}). A request `unless` holds true for goes on unchecked:
 * its handler answers another format itself (a Binary's own content type).
 */
export function fhirJsonOnly(unless?: (req: Request) => boolean): RequestHandler {
  return (req, _res, next) => {
    if (unless?.(req)) return next();
    try {
      checkFhirJsonWanted(formatsOf(req), req.headers.accept);
    } catch (error) {
      return next(error);
    }
    next();
  };
}
