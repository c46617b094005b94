const decoder = new TextDecoder();

/** The text of an NDJSON chunk (stores yield strings or UTF-8 bytes). */
export function chunkText(data: string | Uint8Array): string {
  return typeof data === 'string' ? data : decoder.decode(data);
}

/** The non-empty lines of an NDJSON text, without their newlines. */
export function* ndjsonLines(text: string): Generator<string> {
  let start = 0;
  for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
    if (end > start) yield text.slice(start, end);
    start = end + 1;
  }
  if (start < text.length) yield text.slice(start);
}
