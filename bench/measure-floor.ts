import fs from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { now } from './stats.js';

/**
 * The floor of an NDJSON load: reads `file`, `JSON.parse` and `JSON.stringify` of every line, and
 * appends the text to `out` (created fresh) with one fsync at the end. Answers the time and lines.
 */
export async function measureIngestFloor(file: string, out: string): Promise<{ ms: number; lines: number }> {
  const start = now();
  const fd = fs.openSync(out, 'w');
  let lines = 0;
  try {
    const decoder = new StringDecoder('utf8');
    let carry = '';
    let pending: string[] = [];
    let pendingLength = 0;
    const flushText = (): void => {
      if (pending.length === 0) return;
      fs.writeSync(fd, pending.join(''));
      pending = [];
      pendingLength = 0;
    };
    const take = (line: string): void => {
      if (line.trim() === '') return;
      const text = `${JSON.stringify(JSON.parse(line))}\n`;
      pending.push(text);
      pendingLength += text.length;
      lines++;
      if (pendingLength >= 1 << 20) flushText();
    };
    for await (const chunk of fs.createReadStream(file, { highWaterMark: 1 << 20 })) {
      const text = carry + decoder.write(chunk as Buffer);
      let from = 0;
      for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', from)) {
        take(text.slice(from, nl));
        from = nl + 1;
      }
      carry = text.slice(from);
    }
    take(carry + decoder.end());
    flushText();
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  return { ms: now() - start, lines };
}
