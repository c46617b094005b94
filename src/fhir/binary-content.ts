import type { Request, Response } from 'express';
import { acceptsFhirJson, acceptsMediaType, formatsOf } from '../http/fhir-format.js';
import { FhirError } from '../http/http-error.js';
import type { StoredResource } from '../storage/types.js';

/*
 * A read of a Binary that does not ask for a FHIR format is answered with the Binary's own content
 * (FHIR R4 binary.html "Serving Binary Resources using the RESTful API", http.html "read"): this is
 * how an Attachment's `url` pointing at `Binary/{id}` is downloaded.
 */

/** A token of RFC 9110 §5.6.2. */
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** A media type with optional parameters (RFC 9110 §8.3.1), printable ASCII: safe as `Content-Type`. */
const MEDIA_TYPE = new RegExp(
  `^${TOKEN}/${TOKEN}(?:[ \\t]*;[ \\t]*${TOKEN}=(?:${TOKEN}|"[ \\t!#-\\[\\]-~]*"))*$`,
);

/** base64 (RFC 4648 §4, padded), once whitespace, which `base64Binary` allows, is taken out. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * True when a request of `[type]/[id]` or its vread asks for a Binary's own content: the type is
 * `Binary`, no `_format` is given, and `Accept` accepts no FHIR JSON. Without an `Accept` header,
 * or with one that accepts JSON (`*\/*` does), the answer stays FHIR JSON.
 */
export function wantsNativeBinary(req: Request): boolean {
  return req.params.type === 'Binary' && formatsOf(req).length === 0 && !acceptsFhirJson(req.headers.accept);
}

/**
 * The content of `binary` for a request that {@link wantsNativeBinary}: its `contentType` and its
 * decoded `data`. Throws 406 `not-supported` when that cannot be the answer: the `Accept` header
 * does not accept the content type, or the Binary has no `data` (or none that decodes, or no
 * content type that can be sent), so that its FHIR JSON form, which the client refused, is the
 * only one there is.
 */
export function nativeBinaryContent(
  req: Request,
  binary: StoredResource,
): { contentType: string; bytes: Buffer } {
  const refuse = (reason: string): FhirError =>
    new FhirError(
      406,
      'not-supported',
      `Binary/${binary.id} cannot be answered in its own format: ${reason}`,
    );
  const { contentType, data } = binary;
  if (typeof contentType !== 'string' || !MEDIA_TYPE.test(contentType.trim()))
    throw refuse('its contentType is not a media type');
  if (!acceptsMediaType(req.headers.accept, contentType))
    throw refuse(`the Accept header allows neither FHIR JSON nor ${contentType.trim()}`);
  if (data === undefined) throw refuse('it holds no data');
  const base64 = typeof data === 'string' ? data.replace(/\s+/g, '') : undefined;
  if (base64 === undefined || !BASE64.test(base64)) throw refuse('its data is not base64');
  return { contentType: contentType.trim(), bytes: Buffer.from(base64, 'base64') };
}

/**
 * Sends a Binary's content (200; `Content-Length`, no body for `HEAD`). The content is the client's
 * upload, of any type: `nosniff` and a sandboxing `Content-Security-Policy` keep a browser from
 * running it as a page of this server's origin.
 */
export function sendNativeBinary(res: Response, content: { contentType: string; bytes: Buffer }): void {
  res.setHeader('Content-Type', content.contentType);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Content-Security-Policy', "sandbox; default-src 'none'");
  res.status(200).send(content.bytes);
}
