import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Transform, type TransformCallback } from 'node:stream';
import { jsonTooDeep } from '../../http/body.js';
import { FhirError, HttpError } from '../../http/http-error.js';

/** Limits of {@link readBundleStream}. */
export interface BundleStreamLimits {
  /** Most bytes read (413 above). */
  maxBytes: number;
  /** Deepest nesting of objects and arrays (400 `ERR_JSON_TOO_DEEP` above). */
  maxDepth: number;
  /** Most `entry` items (413 above). */
  maxEntries: number;
}

/** A token of stream-json's parser (packed values only). */
interface Token {
  name: string;
  value?: unknown;
}

/** The part of stream-json's Assembler used here. */
interface Assembler {
  consume(token: Token): unknown;
  done: boolean;
  current: unknown;
}

const START = new Set(['startObject', 'startArray']);
const END = new Set(['endObject', 'endArray']);

function notAnObject(): FhirError {
  return new FhirError(400, 'invalid', 'The body must be a JSON object');
}

function tooLarge(maxBytes: number): HttpError {
  return new HttpError(413, 'ERR_BODY_TOO_LARGE', `The Bundle is larger than ${maxBytes} bytes`);
}

function invalidJson(cause?: unknown): HttpError {
  return new HttpError(400, 'ERR_INVALID_JSON', 'The request body is not valid JSON', { cause });
}

/**
 * Parses a JSON object (a batch or transaction Bundle) from a byte stream with stream-json, so that
 * neither the whole text nor a second copy of it is ever held: each top-level member, and each item
 * of `entry` one by one, is assembled from the tokens as they arrive. The result is what `JSON.parse`
 * of the whole text would give (a repeated key keeps its last value). Nesting depth, size and entry
 * count are checked as the tokens go by, so an over-limit body fails without being read to the end.
 * Loaded on first use (stream-json is an ES module, and only large Bundles need it).
 */
export async function readBundleStream(input: Readable, limits: BundleStreamLimits): Promise<unknown> {
  const [{ default: parser }, { default: AssemblerClass }] = await Promise.all([
    import('stream-json/parser.js'),
    import('stream-json/assembler.js'),
  ]);
  const newAssembler = (): Assembler => new AssemblerClass();
  let bytes = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
      bytes += chunk.length;
      if (bytes > limits.maxBytes) callback(tooLarge(limits.maxBytes));
      else callback(null, chunk);
    },
  });

  const head: Record<string, unknown> = {};
  let entries: unknown[] | undefined;
  let depth = 0;
  let key: string | undefined;
  let value: Assembler | undefined;
  let inEntries = false;
  let closed = false;
  let refused: Error | undefined;

  /** Feeds a token to the value being assembled; stores the value once it is complete. */
  const feed = (assembler: Assembler, token: Token): void => {
    assembler.consume(token);
    if (!assembler.done) return;
    value = undefined;
    if (!inEntries) {
      head[key!] = assembler.current;
      return;
    }
    entries!.push(assembler.current);
    if (entries!.length > limits.maxEntries) {
      throw new FhirError(413, 'too-costly', `A Bundle may hold at most ${limits.maxEntries} entries`);
    }
  };

  const take = (token: Token): void => {
    const { name } = token;
    if (START.has(name) && ++depth > limits.maxDepth) throw jsonTooDeep(limits.maxDepth);
    if (END.has(name)) depth--;
    if (closed) throw invalidJson();
    if (value) return feed(value, token);
    if (depth === 0 && name !== 'endObject') throw notAnObject();
    if (depth === 1 && name === 'startObject') return; // the Bundle itself
    if (depth === 1 && name === 'startArray') throw notAnObject();
    if (depth === 0) {
      closed = true;
      return;
    }
    if (inEntries) {
      if (depth === 1 && name === 'endArray') {
        inEntries = false;
        return;
      }
    } else if (depth === 1 && name === 'keyValue') {
      key = token.value as string;
      return;
    } else if (depth === 2 && key === 'entry' && name === 'startArray') {
      // A repeated key replaces the earlier value, as with JSON.parse.
      entries = [];
      head.entry = entries;
      inEntries = true;
      return;
    }
    value = newAssembler();
    feed(value, token);
  };

  try {
    await pipeline(
      input,
      counter,
      parser.asStream({ packValues: true, streamValues: false }),
      async function (tokens: AsyncIterable<Token>) {
        for await (const token of tokens) {
          try {
            take(token);
          } catch (error) {
            refused = error instanceof Error ? error : new Error(String(error));
            throw refused;
          }
        }
      },
    );
  } catch (error) {
    // A limit refused by `take` (the pipeline may report the abort it caused instead); stream-json's
    // syntax errors are plain Errors: a malformed body, like JSON.parse's.
    if (refused !== undefined) throw refused;
    if (error instanceof HttpError) throw error;
    throw invalidJson(error);
  }
  if (!closed) throw invalidJson();
  return head;
}
