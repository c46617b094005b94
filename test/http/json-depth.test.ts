import { gzipSync } from 'node:zlib';
import express from 'express';
import fc from 'fast-check';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { jsonBody } from '../../src/http/body.js';
import { fhirErrorHandler, scimErrorHandler } from '../../src/http/error-rendering.js';
import {
  DEFAULT_MAX_JSON_DEPTH,
  jsonNestingExceeds,
  valueNestingExceeds,
} from '../../src/http/json-depth.js';

const nested = (depth: number) =>
  `${'{"a":['.repeat(depth >> 1)}${depth % 2 ? '{}' : ''}${']}'.repeat(depth >> 1)}`;
const both = (text: string, max: number) => [
  jsonNestingExceeds(text, max),
  jsonNestingExceeds(Buffer.from(text, 'utf8'), max),
  valueNestingExceeds(JSON.parse(text) as unknown, max),
];

describe('jsonNestingExceeds', () => {
  it('counts objects and arrays, up to and over the limit', () => {
    expect(both('1', 1)).toEqual([false, false, false]);
    expect(both('{}', 1)).toEqual([false, false, false]);
    expect(both('[{}]', 1)).toEqual([true, true, true]);
    for (const depth of [1, 2, 7, 100]) {
      expect(both(nested(depth), depth)).toEqual([false, false, false]);
      expect(both(nested(depth + 1), depth)).toEqual([true, true, true]);
    }
    // Siblings do not add up.
    expect(both(`[${'[[]],'.repeat(1000)}[]]`, 3)).toEqual([false, false, false]);
  });

  it('ignores brackets inside strings, escaped quotes included', () => {
    expect(both('{"a":"[[[{{{"}', 1)).toEqual([false, false, false]);
    expect(both('{"a":"\\"[[[","b":"\\\\"}', 1)).toEqual([false, false, false]);
    expect(both('{"a":"\\\\","b":[[]]}', 2)).toEqual([true, true, true]);
    expect(both('{"é€😀[":"ü[[["}', 1)).toEqual([false, false, false]);
  });

  it('agrees with the depth of the parsed value for any JSON text', () => {
    const depthOf = (value: unknown): number =>
      value !== null && typeof value === 'object' ? 1 + Math.max(0, ...Object.values(value).map(depthOf)) : 0;
    fc.assert(
      fc.property(fc.json({ depthSize: 'large' }), fc.integer({ min: 0, max: 12 }), (text, max) => {
        const expected = depthOf(JSON.parse(text)) > max;
        expect(both(text, max)).toEqual([expected, expected, expected]);
      }),
      { numRuns: 500 },
    );
  });

  it('never recurses or throws, whatever the text', () => {
    expect(jsonNestingExceeds('['.repeat(1_000_000), 1_000_000)).toBe(false);
    expect(jsonNestingExceeds('['.repeat(1_000_001), 1_000_000)).toBe(true);
    // Stray closers do not buy extra depth.
    expect(jsonNestingExceeds(']]]]]][[', 1)).toBe(true);
    expect(jsonNestingExceeds('"unterminated [[[', 1)).toBe(false);
  });

  it('walks a parsed value no deeper than the limit, however deep the value', () => {
    const deep = JSON.parse(`${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}`) as unknown;
    expect(valueNestingExceeds(deep, DEFAULT_MAX_JSON_DEPTH)).toBe(true);
    const moderate = JSON.parse(`${'['.repeat(5000)}${']'.repeat(5000)}`) as unknown;
    expect([valueNestingExceeds(moderate, 4999), valueNestingExceeds(moderate, 5000)]).toEqual([true, false]);
    expect(valueNestingExceeds({ a: [1, 'x', null, { b: {} }] }, 4)).toBe(false);
    expect(valueNestingExceeds({ a: [1, 'x', null, { b: {} }] }, 3)).toBe(true);
  });
});

describe('jsonBody depth limit', () => {
  function app(kind: 'fhir' | 'scim', maxDepth?: number) {
    const a = express();
    a.post('/', jsonBody({ types: ['application/json'], ...(maxDepth ? { maxDepth } : {}) }), (req, res) => {
      res.json({ received: req.body as unknown });
    });
    a.use(kind === 'fhir' ? fhirErrorHandler(() => {}) : scimErrorHandler(() => {}));
    return a;
  }
  // Sent as is (superagent would serialize a Buffer given with a JSON type).
  const post = (a: express.Express, body: string | Buffer, type = 'application/json') =>
    request(a)
      .post('/')
      .set('Content-Type', type)
      .serialize((b: unknown) => b as string)
      .send(body as string);

  it('answers 400 in the router protocol above the limit (default 100)', async () => {
    expect(DEFAULT_MAX_JSON_DEPTH).toBe(100);
    expect((await post(app('fhir'), nested(100))).status).toBe(200);
    const fhir = await post(app('fhir'), nested(101));
    expect(fhir.status).toBe(400);
    expect(fhir.body).toMatchObject({ resourceType: 'OperationOutcome', issue: [{ code: 'invalid' }] });
    const scim = await post(app('scim'), nested(5000));
    expect(scim.status).toBe(400);
    expect(scim.body).toMatchObject({ status: '400', scimType: 'invalidSyntax' });
    expect((await post(app('fhir', 4), nested(5))).status).toBe(400);
    expect((await post(app('fhir', 4), nested(4))).body.received).toEqual(JSON.parse(nested(4)));
  });

  it('scans the decoded text of a UTF-16 body', async () => {
    const utf16 = (text: string) => Buffer.from(text, 'utf16le');
    // U+7B22 is encoded as the bytes 0x22 0x7B: a quote and a brace if read as single bytes.
    const tricky = `{"a":"${'\u7b22'.repeat(200)}"}`;
    const ok = await post(app('fhir'), utf16(tricky), 'application/json; charset=utf-16le');
    expect(ok.status).toBe(200);
    expect(ok.body.received).toEqual(JSON.parse(tricky));
    const deep = await post(app('fhir'), utf16(nested(101)), 'application/json; charset=utf-16le');
    expect(deep.status).toBe(400);
  });

  it('decodes ASCII, multi-byte UTF-8, a byte order mark and gzip alike; refuses other charsets', async () => {
    const value = { name: 'Zoë 😀 José', n: [1, 2, { deep: 'ü' }], plain: 'ascii only' };
    const text = JSON.stringify(value);
    expect((await post(app('fhir'), text)).body.received).toEqual(value);
    expect((await post(app('fhir'), '{"plain":"ascii"}')).body.received).toEqual({ plain: 'ascii' });
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]);
    expect((await post(app('fhir'), bom)).body.received).toEqual(value);
    const charsetUtf8 = await post(app('fhir'), text, 'application/json; charset="UTF-8"');
    expect(charsetUtf8.body.received).toEqual(value);
    const gzipped = await request(app('fhir'))
      .post('/')
      .set('Content-Type', 'application/json')
      .set('Content-Encoding', 'gzip')
      .serialize((b: unknown) => b as string)
      .send(gzipSync(Buffer.from(text)) as unknown as string);
    expect(gzipped.body.received).toEqual(value);
    for (const charset of ['latin1', 'utf8', 'utf-32']) {
      const refused = await post(app('fhir'), text, `application/json; charset=${charset}`);
      expect(refused.status, charset).toBe(415);
      expect(refused.body.resourceType).toBe('OperationOutcome');
    }
  });

  it('answers 400 for text that is not JSON, in each protocol, and reads an empty chunked body as {}', async () => {
    for (const bad of ['{"a":', 'nope', '   ', '{"a":1}x']) {
      const fhir = await post(app('fhir'), bad);
      expect(fhir.status, bad).toBe(400);
      expect(fhir.body).toMatchObject({ resourceType: 'OperationOutcome', issue: [{ code: 'invalid' }] });
      const scim = await post(app('scim'), bad);
      expect(scim.status, bad).toBe(400);
      expect(scim.body).toMatchObject({ status: '400', scimType: 'invalidSyntax' });
    }
    const empty = await request(app('fhir'))
      .post('/')
      .set('Content-Type', 'application/json')
      .set('Transfer-Encoding', 'chunked')
      .serialize(() => '')
      .send('');
    expect(empty.status).toBe(200);
    expect(empty.body.received).toEqual({});
  });
});
