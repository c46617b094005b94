import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import net from 'node:net';
import express from 'express';
import { afterEach, describe, expect, it } from 'vitest';
import { fallbackErrorHandler } from '../../src/http/error-rendering.js';
import { notFoundHandler, protectServer } from '../../src/http/server-limits.js';
import { eventually } from '../helpers/eventually.js';
import { sleep } from '../helpers/sleep.js';

const servers: Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function listen(app: express.Express, limits?: Parameters<typeof protectServer>[1]): Promise<number> {
  const server = protectServer(app.listen(0, '127.0.0.1'), limits);
  servers.push(server);
  await once(server, 'listening');
  return (server.address() as net.AddressInfo).port;
}

/** Sends raw bytes and collects the whole answer until the server closes the connection. */
function rawRequest(port: number, request: Buffer | string): Promise<{ text: string; error?: string }> {
  return new Promise((resolve) => {
    let text = '';
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    socket.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    socket.on('error', (error: NodeJS.ErrnoException) => resolve({ text, error: error.code ?? 'error' }));
    socket.on('close', () => resolve({ text }));
  });
}

function parse(answer: { text: string; error?: string }) {
  expect(answer.error).toBeUndefined();
  const [head, body] = answer.text.split('\r\n\r\n', 2) as [string, string];
  const status = Number(head.split(' ')[1]);
  const contentType = /content-type:\s*([^\r\n;]+)/i.exec(head)?.[1];
  return {
    status,
    contentType,
    body: JSON.parse(body) as { resourceType: string; issue: { code: string }[] },
  };
}

function app(): express.Express {
  const app = express();
  app.get('/ok', (_req, res) => res.json({ ok: true }));
  app.use(notFoundHandler());
  return app;
}

describe('protectServer', () => {
  it('answers parser errors with an OperationOutcome instead of an empty body or a reset', async () => {
    const port = await listen(app());
    const cases: [string, Buffer | string, number][] = [
      ['a 20 KB request line', `GET /${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431],
      ['a 100 KB path', `GET /${'a'.repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431],
      ['oversized headers', `GET /ok HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`, 431],
      [
        'a raw 0xFF byte in the path',
        Buffer.concat([
          Buffer.from('GET /a'),
          Buffer.from([0xff]),
          Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n'),
        ]),
        400,
      ],
      ['garbage instead of HTTP', 'HELLO THERE\r\n\r\n', 400],
    ];
    for (const [name, request, status] of cases) {
      const answer = parse(await rawRequest(port, request));
      expect({ name, status: answer.status }).toEqual({ name, status });
      expect(answer.contentType).toBe('application/fhir+json');
      expect(answer.body.resourceType).toBe('OperationOutcome');
    }
    // The server still serves normal requests.
    const ok = await fetch(`http://127.0.0.1:${port}/ok`);
    expect(ok.status).toBe(200);
  });

  it('sets header, request and keep-alive timeouts, and validates them', () => {
    const server = protectServer(express().listen(0, '127.0.0.1'));
    servers.push(server);
    expect(server.headersTimeout).toBe(20_000);
    expect(server.requestTimeout).toBe(120_000);
    expect(server.keepAliveTimeout).toBe(5_000);
    const tuned = protectServer(express().listen(0, '127.0.0.1'), {
      requestTimeout: 10_000,
      headersTimeout: 60_000,
    });
    servers.push(tuned);
    expect(tuned.requestTimeout).toBe(10_000);
    expect(tuned.headersTimeout).toBe(10_000);
    expect(() => protectServer(express().listen(0), { keepAliveTimeout: -1 })).toThrow(
      expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
    );
  });

  it('answers a request whose headers never complete, once the headers timeout passes', async () => {
    // Node looks for expired requests every `connectionsCheckingInterval` (30 s unless set when
    // the server is created): a short one here so the test does not wait.
    const server = protectServer(createServer({ connectionsCheckingInterval: 50 }, app()), {
      headersTimeout: 200,
      requestTimeout: 200,
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    const answer = await new Promise<string>((resolve) => {
      let text = '';
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.write('GET /ok HTTP/1.1\r\nHost: x\r\n');
      });
      socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
      socket.on('error', () => resolve(text));
      socket.on('close', () => resolve(text));
    });
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer).toContain('"OperationOutcome"');
  });
});

describe('protectServer requestTimeout and maxConnections, tried just over', () => {
  function bodyApp(): express.Express {
    const app = express();
    app.get('/ok', (_req, res) => res.json({ ok: true }));
    app.post('/echo', express.raw({ type: '*/*' }), (req, res) =>
      res.json({ size: (req.body as Buffer).length }),
    );
    app.use(notFoundHandler());
    return app;
  }

  it('answers 408 with an OperationOutcome and closes the connection when the body does not arrive within requestTimeout', async () => {
    // Headers arrive at once; the body never completes (requestTimeout 120 s by default, 300 ms here).
    const server = protectServer(createServer({ connectionsCheckingInterval: 50 }, bodyApp()), {
      headersTimeout: 300,
      requestTimeout: 300,
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    const answer = parse(
      await rawRequest(
        port,
        'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\nonly part',
      ),
    );
    expect(answer.status).toBe(408);
    expect(answer.contentType).toBe('application/fhir+json');
    expect(answer.body.resourceType).toBe('OperationOutcome');
    // A whole request is still served.
    const ok = await fetch(`http://127.0.0.1:${port}/echo`, { method: 'POST', body: 'hello' });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toEqual({ size: 5 });
  });

  it('closes at once a connection over maxConnections in all (4,096 by default, 5 here), from any address, and serves again once some close', async () => {
    const limit = 5;
    const server = protectServer(createServer(bodyApp()), {
      maxConnections: limit,
      maxConnectionsPerAddress: Number.POSITIVE_INFINITY,
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    const open = () => new Promise<number>((resolve) => server.getConnections((_e, n) => resolve(n)));
    // `limit` connections from distinct addresses, each holding an unfinished request.
    const held: net.Socket[] = [];
    for (let i = 0; i < limit; i++) {
      const socket = net.connect({ port, host: '127.0.0.1', localAddress: `127.0.0.${i + 1}` });
      socket.on('error', () => undefined);
      await once(socket, 'connect');
      socket.write('GET /ok HTTP/1.1\r\nHost: x\r\n');
      held.push(socket);
    }
    try {
      await eventually('every held connection open', async () => (await open()) >= limit);
      // One more, from yet another address: closed by the server without an answer.
      const over = await rawRequest(port, 'GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      expect(over.text).toBe('');
      expect(await open()).toBe(limit);
      // Once one held connection ends, a new client is served.
      held.pop()!.destroy();
      await eventually('the ended connection closed', async () => (await open()) < limit);
      const answer = await rawRequest(port, 'GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      expect(answer.text).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      for (const socket of held) socket.destroy();
    }
  });
});

describe('notFoundHandler', () => {
  it('answers unrouted paths with a 404 OperationOutcome', async () => {
    const port = await listen(app());
    const res = await fetch(`http://127.0.0.1:${port}/nowhere?x=1`, { method: 'POST' });
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/fhir\+json/);
    const body = (await res.json()) as { resourceType: string; issue: { code: string }[] };
    expect(body.resourceType).toBe('OperationOutcome');
    expect(body.issue[0]!.code).toBe('not-found');
  });
});

describe('protectServer against slow clients (slowloris)', () => {
  it('holds at most maxConnectionsPerAddress sockets of one address, serves other clients, and frees them at headersTimeout', async () => {
    const limit = 20;
    const headersTimeout = 1500;
    const server = protectServer(createServer({ connectionsCheckingInterval: 200 }, app()), {
      headersTimeout,
      maxConnectionsPerAddress: limit,
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    const open = () => new Promise<number>((resolve) => server.getConnections((_e, n) => resolve(n)));

    // 200 connections that send a request's headers one line every 300 ms and never end them.
    const attackers: net.Socket[] = [];
    const closedAt: number[] = [];
    const started = Date.now();
    for (let i = 0; i < 200; i++) {
      const socket = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.1' });
      socket.on('error', () => undefined);
      socket.on('close', () => closedAt.push(Date.now() - started));
      socket.on('connect', () => socket.write('GET /ok HTTP/1.1\r\nHost: x\r\n'));
      attackers.push(socket);
    }
    const drip = setInterval(() => {
      for (const socket of attackers) if (!socket.destroyed) socket.write('X-Slow: 1\r\n');
    }, 300);
    try {
      let peak = 0;
      for (let i = 0; i < 5; i++) {
        await sleep(100); // sampling during the attack
        peak = Math.max(peak, await open());
      }
      expect(peak).toBeLessThanOrEqual(limit);
      // Another client (another loopback address) is served during the attack.
      const answer = await new Promise<string>((resolve, reject) => {
        let text = '';
        const socket = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' }, () =>
          socket.write('GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'),
        );
        socket.on('data', (chunk: Buffer) => (text += chunk.toString()));
        socket.on('close', () => resolve(text));
        socket.on('error', reject);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 200/);
      // The held ones are closed once headersTimeout has passed (checked every 200 ms).
      await eventually('the held connections closed', async () => (await open()) === 0, { intervalMs: 50 });
      const freedAt = Date.now() - started;
      await eventually('every attacker closed', () => closedAt.length === attackers.length, {
        intervalMs: 50,
      });
      const refused = closedAt.filter((t) => t < headersTimeout).length;
      expect(refused).toBeGreaterThanOrEqual(attackers.length - limit);
      console.info(
        `slowloris: 200 slow connections from one address; held at peak ${peak} (limit ${limit}), ` +
          `${refused} closed at once, the held ones freed on the server by ${freedAt} ms ` +
          `(headersTimeout ${headersTimeout} ms, then 1 s to drain)`,
      );
    } finally {
      clearInterval(drip);
      for (const socket of attackers) socket.destroy();
    }
  });

  it('refuses a bad maxConnectionsPerAddress or maxConnections', () => {
    for (const bad of [
      { maxConnectionsPerAddress: 0 },
      { maxConnections: 1.5 },
      { maxConnectionsPerAddress: -1 },
    ]) {
      expect(() => protectServer(createServer(), bad)).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
      );
    }
  });
});

/** A raw answer's status, media type and JSON body. */
function parseAny(answer: { text: string; error?: string }) {
  expect(answer.error).toBeUndefined();
  const [head, body] = answer.text.split('\r\n\r\n', 2) as [string, string];
  return {
    status: Number(head.split(' ')[1]),
    type: /content-type:\s*([^\r\n;]+)/i.exec(head)?.[1],
    body: JSON.parse(body) as Record<string, unknown>,
  };
}

const SCIM_ERROR = 'urn:ietf:params:scim:api:messages:2.0:Error';

/** What a SCIM, an OAuth and a FHIR error answer of `status` look like. */
const scim = (status: number) => ({
  status,
  type: 'application/scim+json',
  body: { schemas: [SCIM_ERROR], status: String(status) },
});
const oauth = (status: number) => ({ status, type: 'application/json', body: { error: 'invalid_request' } });
const fhir = (status: number) => ({
  status,
  type: 'application/fhir+json',
  body: { resourceType: 'OperationOutcome' },
});

describe('errors no router answers, in the protocol of their path', () => {
  it('protectServer: SCIM under /scim/v2, OAuth under /oauth2/token and /oauth2/jwks, FHIR elsewhere', async () => {
    const host = express();
    // Reads the body: its malformed chunk is refused by the parser before any answer.
    host.post('/scim/v2/Users', express.raw({ type: '*/*' }), (_req, res) => res.json({}));
    host.use(notFoundHandler());
    const port = await listen(host);
    const parens = '('.repeat(20_000);
    const cases: [string, Buffer | string, object][] = [
      [
        'a SCIM filter of 20,000 parentheses',
        `GET /scim/v2/Users?filter=${parens} HTTP/1.1\r\nHost: x\r\n\r\n`,
        scim(431),
      ],
      // Express routes paths case-insensitively: so does the choice of the format.
      [
        'oversized headers',
        `GET /SCIM/v2/Users HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`,
        scim(431),
      ],
      [
        'an absolute-form target',
        `GET http://x/scim/v2/Users?filter=${parens} HTTP/1.1\r\nHost: x\r\n\r\n`,
        scim(431),
      ],
      [
        'a raw 0xFF byte in a SCIM path',
        Buffer.concat([
          Buffer.from('GET /scim/v2/Users/a'),
          Buffer.from([0xff]),
          Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n'),
        ]),
        scim(400),
      ],
      [
        'a malformed chunk of a SCIM body (after the headers)',
        'POST /scim/v2/Users HTTP/1.1\r\nHost: x\r\nContent-Type: application/scim+json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
        scim(400),
      ],
      [
        'the token endpoint',
        `POST /oauth2/token?${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`,
        oauth(431),
      ],
      ['the JWKS', `GET /oauth2/jwks?${'a'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, oauth(431)],
      ['a path that only starts like SCIM', `GET /scim/v2x?${parens} HTTP/1.1\r\nHost: x\r\n\r\n`, fhir(431)],
      ['FHIR', `GET /fhir/R4/Patient?name=${parens} HTTP/1.1\r\nHost: x\r\n\r\n`, fhir(431)],
      ['garbage instead of HTTP', 'HELLO THERE\r\n\r\n', fhir(400)],
    ];
    for (const [name, request, expected] of cases) {
      expect({ name, ...parseAny(await rawRequest(port, request)) }).toMatchObject({ name, ...expected });
    }
  });

  it('protectServer writes nothing more after an answer already sent (a malformed body after a 404)', async () => {
    const port = await listen(app());
    const answer = await rawRequest(
      port,
      'POST /scim/v2/Users HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
    );
    expect(answer.text.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    expect(parseAny(answer)).toMatchObject(scim(404));
  });

  it("protectServer follows the server's maxHeaderSize and the errorPaths given", async () => {
    const server = protectServer(createServer({ maxHeaderSize: 2048 }, app()), {
      errorPaths: { scim: ['/api/scim'], oauth: [] },
    });
    servers.push(server);
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as net.AddressInfo).port;
    const line = (target: string) => `GET ${target}?filter=${'('.repeat(3000)} HTTP/1.1\r\nHost: x\r\n\r\n`;
    expect(parseAny(await rawRequest(port, line('/api/scim/Users')))).toMatchObject(scim(431));
    expect(parseAny(await rawRequest(port, line('/scim/v2/Users')))).toMatchObject(fhir(431));
    expect(parseAny(await rawRequest(port, line('/oauth2/token')))).toMatchObject(fhir(431));
    for (const errorPaths of [
      { scim: ['scim'] },
      { scim: ['/scim/'] },
      { oauth: '/token' },
      { scm: ['/scim'] },
    ]) {
      expect(() => protectServer(createServer(), { errorPaths } as never)).toThrow(
        expect.objectContaining({ code: 'ERR_INVALID_OPTION' }),
      );
    }
  });

  it('notFoundHandler and fallbackErrorHandler: a 404, a body too large before routing, a malformed URL', async () => {
    const host = express();
    // A host's own body parser before the routers: its 413 reaches the last error handler.
    host.use(express.json({ limit: '100b', type: ['application/json', 'application/scim+json'] }));
    host.get('/scim/v2/Users/:id', (_req, res) => res.json({}));
    host.use(notFoundHandler());
    host.use(fallbackErrorHandler({ onError: () => undefined }));
    const port = await listen(host);
    const base = `http://127.0.0.1:${port}`;
    const answer = async (res: Response) => ({
      status: res.status,
      type: res.headers.get('content-type')?.split(';')[0],
      body: (await res.json()) as Record<string, unknown>,
    });
    const big = JSON.stringify({ userName: 'x'.repeat(1000) });
    const post = (path: string) =>
      fetch(`${base}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/scim+json' },
        body: big,
      });
    expect(await answer(await post('/scim/v2/Users'))).toMatchObject(scim(413));
    expect(await answer(await post('/oauth2/token'))).toMatchObject({ ...oauth(413), body: {} });
    expect(await answer(await post('/fhir/R4/Patient'))).toMatchObject(fhir(413));
    expect(await answer(await fetch(`${base}/scim/v2/Users/%E0%A4%A`))).toMatchObject(scim(400));
    expect(await answer(await fetch(`${base}/scim/v2/Nothing`))).toMatchObject(scim(404));
    expect(await answer(await fetch(`${base}/oauth2/token/more`, { method: 'POST' }))).toMatchObject(
      oauth(404),
    );
    expect(await answer(await fetch(`${base}/nowhere`))).toMatchObject(fhir(404));
    // A given errorPaths replaces the defaults.
    const other = express();
    other.use(notFoundHandler({ errorPaths: { scim: ['/api/scim'] } }));
    const otherBase = `http://127.0.0.1:${await listen(other)}`;
    expect(await answer(await fetch(`${otherBase}/api/scim/Users`))).toMatchObject(scim(404));
    expect(await answer(await fetch(`${otherBase}/scim/v2/Users`))).toMatchObject(fhir(404));
  });
});
