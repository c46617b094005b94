import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import { PATCH_OP_SCHEMA_ID } from '../../src/scim/schema.js';
import { expectScimError } from '../helpers/protocol-errors.js';
import { createScimApp, MOUNT, SCIM } from './scim-app.js';

const CORE = 'urn:ietf:params:scim:schemas:core:2.0:User';
const ENTERPRISE = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
const HOSTILE = ['__proto__', 'constructor', 'toString', 'valueOf', 'hasOwnProperty', 'prototype'];

/** A User body as raw JSON text with `extra` members spliced in (so `__proto__` stays a key). */
function userJson(extra = '', name = '"givenName":"Alice"'): string {
  return `{"schemas":["${CORE}"],"userName":"alice@example.org","userType":"Practitioner","name":{${name}}${extra}}`;
}

const patchJson = (operations: string) =>
  `{"schemas":["${PATCH_OP_SCHEMA_ID}"],"Operations":[${operations}]}`;

async function setup() {
  const ctx = await createScimApp();
  const agent = request(ctx.app);
  const raw = (method: 'post' | 'put' | 'patch', path: string, json: string) =>
    agent[method](`${MOUNT}${path}`).set('Authorization', ctx.admin).set('Content-Type', SCIM).send(json);
  return { ...ctx, agent, raw };
}

/** Own keys at any depth of `value`. */
function allKeys(value: unknown, out: string[] = []): string[] {
  if (Array.isArray(value)) for (const item of value) allKeys(item, out);
  else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      out.push(key);
      allKeys(item, out);
    }
  }
  return out;
}

afterEach(() => {
  expect(({} as Record<string, unknown>).polluted).toBeUndefined();
});

describe('SCIM bodies with keys named like Object.prototype properties', () => {
  it('ignores them at the top level and in an extension: nothing of them is stored or answered', async () => {
    const { raw, storage } = await setup();
    const extra = HOSTILE.map((k) => `,"${k}":{"polluted":"yes"}`).join('');
    const ext = `,"${ENTERPRISE}":{"department":"D"${extra}}`;
    const created = await raw('post', '/Users', userJson(extra + ext));
    expect(created.status).toBe(201);
    expect(allKeys(created.body).filter((k) => HOSTILE.includes(k))).toEqual([]);
    const stored = await storage.readUser('proj-a', created.body.id as string);
    expect(allKeys(stored).filter((k) => HOSTILE.includes(k))).toEqual([]);
    expect(Object.getPrototypeOf(stored.data)).toBe(Object.prototype);

    const replaced = await raw('put', `/Users/${created.body.id}`, userJson(extra + ext));
    expect(replaced.status).toBe(200);
    expect(
      allKeys(await storage.readUser('proj-a', created.body.id as string)).filter((k) => HOSTILE.includes(k)),
    ).toEqual([]);
  });

  it('refuses __proto__ and constructor inside a complex attribute (POST, PUT)', async () => {
    const { raw, storage } = await setup();
    const created = await raw('post', '/Users', userJson());
    expect(created.status).toBe(201);
    for (const key of ['__proto__', 'constructor']) {
      const name = `"givenName":"Alice","${key}":{"polluted":"yes"}`;
      expectScimError(
        await raw('post', '/Users', userJson('', name).replace('alice@', 'bob@')),
        400,
        'invalidValue',
      );
      expectScimError(await raw('put', `/Users/${created.body.id}`, userJson('', name)), 400, 'invalidValue');
    }
    expect((await storage.readUser('proj-a', created.body.id as string)).version).toBe(1);
  });

  it('refuses them in PATCH values and paths, and changes nothing', async () => {
    const { raw, storage } = await setup();
    const id = (await raw('post', '/Users', userJson())).body.id as string;
    const values = [
      '{"op":"add","value":{"__proto__":{"polluted":"yes"}}}',
      '{"op":"replace","value":{"constructor":{"prototype":{"polluted":"yes"}}}}',
      '{"op":"replace","path":"name","value":{"__proto__":{"polluted":"yes"}}}',
      '{"op":"add","path":"name","value":{"constructor":{"polluted":"yes"}}}',
      '{"op":"add","path":"emails","value":[{"value":"a@b.c","__proto__":{"polluted":"yes"}}]}',
    ];
    for (const op of values)
      expectScimError(await raw('patch', `/Users/${id}`, patchJson(op)), 400, 'invalidValue');
    const paths = [
      '__proto__',
      'constructor',
      '__proto__.polluted',
      'name.__proto__',
      'name.constructor',
      'toString',
    ];
    for (const path of paths) {
      const op = `{"op":"add","path":"${path}","value":"yes"}`;
      expectScimError(await raw('patch', `/Users/${id}`, patchJson(op)), 400, 'invalidPath');
    }
    const stored = await storage.readUser('proj-a', id);
    expect(stored.version).toBe(1);
    expect(allKeys(stored).filter((k) => HOSTILE.includes(k))).toEqual([]);
  });

  it('refuses filters on inherited names as unknown attributes', async () => {
    const { agent, admin, raw } = await setup();
    await raw('post', '/Users', userJson());
    const list = (filter: string) =>
      agent.get(`${MOUNT}/Users`).query({ filter }).set('Authorization', admin);
    for (const attribute of ['constructor', 'toString', 'hasOwnProperty', 'name.constructor']) {
      expectScimError(await list(`${attribute} eq "alice@example.org"`), 400, 'invalidFilter');
    }
    // Not an attribute name at all.
    expectScimError(await list('__proto__ eq "alice@example.org"'), 400, 'invalidFilter');
  });
});

describe('SCIM JSON nesting depth', () => {
  const deep = (depth: number) => `${'['.repeat(depth)}${']'.repeat(depth)}`;

  it('answers 400 invalidSyntax for deep POST, PUT, PATCH and .search bodies', async () => {
    const { raw, storage } = await setup();
    const id = (await raw('post', '/Users', userJson())).body.id as string;
    expectScimError(
      await raw('post', '/Users', userJson(`,"x":${deep(5000)}`).replace('alice@', 'bob@')),
      400,
      'invalidSyntax',
    );
    expectScimError(await raw('put', `/Users/${id}`, userJson(`,"x":${deep(5000)}`)), 400, 'invalidSyntax');
    expectScimError(
      await raw(
        'patch',
        `/Users/${id}`,
        patchJson(`{"op":"add","path":"displayName","value":${deep(5000)}}`),
      ),
      400,
      'invalidSyntax',
    );
    expectScimError(
      await raw('post', '/Users/.search', `{"filter":"userName pr","x":${deep(5000)}}`),
      400,
      'invalidSyntax',
    );
    expect((await storage.readUser('proj-a', id)).version).toBe(1);
    expect((await storage.findUsers('proj-a', { userName: 'bob@example.org' })).length).toBe(0);
  });

  it('still accepts ordinary bodies', async () => {
    const { raw } = await setup();
    const created = await raw('post', '/Users', userJson(`,"x":${deep(50)}`));
    expect(created.status).toBe(201);
  });
});
