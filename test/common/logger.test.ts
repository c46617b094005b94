import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { errorSink } from '../../src/http/request-logging.js';
import { StorageUnavailableError } from '../../src/storage/errors.js';

/** A real pino logger whose lines are kept, parsed. */
function pinoLines(): { logger: ReturnType<typeof pino>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      callback();
    },
  });
  return { logger: pino({ base: null }, stream), lines };
}

describe('error lines through pino', () => {
  it('keep the error’s type, code and message: pino’s err serializer does not rename them "Object"', () => {
    const { logger, lines } = pinoLines();
    const log = errorSink({ logger });
    log(new StorageUnavailableError('The database is unavailable: connect ECONNREFUSED 127.0.0.1:1'));
    log('not an Error');
    expect(lines[0]!.err).toMatchObject({
      type: 'StorageUnavailableError',
      code: 'ERR_STORAGE_UNAVAILABLE',
      message: 'The database is unavailable: connect ECONNREFUSED 127.0.0.1:1',
      stack: expect.stringMatching(/^StorageUnavailableError: The database is unavailable/),
    });
    expect(lines[1]!.err).toMatchObject({ type: 'string', message: 'not an Error' });
  });

  it('still redact secrets from the message and stack', () => {
    const { logger, lines } = pinoLines();
    errorSink({ logger })(new Error('refused Bearer abc.def.ghi'));
    expect(JSON.stringify(lines[0])).not.toContain('abc.def.ghi');
    expect((lines[0]!.err as { message: string }).message).toBe('refused Bearer [redacted]');
  });
});
