import { describe, expect, it } from 'vitest';
import {
  identifierKeys,
  identifierTokenKey,
  identifierTokenKeys,
  matchesIdentifier,
} from '../../src/storage/identifier-keys.js';
import type { IdentifierToken } from '../../src/storage/types.js';

/** The scanning test search used before the index (kept here verbatim as the reference). */
function scanned(resource: Record<string, unknown>, tokens: IdentifierToken[]): boolean {
  const raw = resource.identifier;
  const list: unknown[] = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
  for (const item of list) {
    if (item === null || typeof item !== 'object') continue;
    const { system, value } = item as { system?: unknown; value?: unknown };
    for (const t of tokens) {
      if (t.value !== undefined && value !== t.value) continue;
      if (t.system === null && system !== undefined) continue;
      if (typeof t.system === 'string' && system !== t.system) continue;
      return true;
    }
  }
  return false;
}

const SYSTEMS: unknown[] = [undefined, null, '', 'a', 'a|b', 'a|', 5];
const VALUES: unknown[] = [undefined, null, '', '1', 'c', 'b|c', '|c', 1];

/** Identifier elements of every shape, including ones that are not objects. */
function elements(): unknown[] {
  const out: unknown[] = [null, 'a|1', 7, [], ['a', '1']];
  for (const system of SYSTEMS) {
    for (const value of VALUES) {
      const element: Record<string, unknown> = {};
      if (system !== undefined) element.system = system;
      if (value !== undefined) element.value = value;
      out.push(element);
    }
  }
  return out;
}

function tokens(): IdentifierToken[] {
  const out: IdentifierToken[] = [];
  for (const system of [undefined, null, '', 'a', 'a|b', 'a|'] as const) {
    for (const value of [undefined, '', '1', 'b|c', '|c', 'c'] as const) {
      const token: IdentifierToken = {};
      if (system !== undefined) token.system = system;
      if (value !== undefined) token.value = value;
      out.push(token);
    }
  }
  return out;
}

describe('identifierKeys', () => {
  it('answers every token exactly as a scan of the bodies does', () => {
    const resources: Record<string, unknown>[] = [{}, { identifier: 'x' }, { identifier: null }];
    const all = elements();
    for (const a of all) {
      resources.push({ identifier: a });
      resources.push({ identifier: [a] });
      for (const b of all.slice(0, 12)) resources.push({ identifier: [a, b] });
    }
    let matched = 0;
    const wrong: string[] = [];
    for (const resource of resources) {
      const keys = new Set(identifierKeys(resource));
      for (const token of tokens()) {
        const key = identifierTokenKey(token);
        const byIndex = key !== undefined && keys.has(key);
        const expected =
          token.system === undefined && token.value === undefined ? false : scanned(resource, [token]);
        if (byIndex !== expected || matchesIdentifier(resource, [token]) !== expected) {
          wrong.push(`${JSON.stringify(resource)} ${JSON.stringify(token)}`);
        }
        if (expected) matched += 1;
      }
    }
    expect(wrong).toEqual([]);
    // The domain exercises matches as well as misses.
    expect(matched).toBeGreaterThan(1000);
  });

  it('gives each resource distinct keys, none for tombstone-like bodies, and dedupes token keys', () => {
    const keys = identifierKeys({
      identifier: [
        { system: 'a', value: '1' },
        { system: 'a', value: '1' },
      ],
    });
    expect([...keys].sort()).toEqual(['s:a', 't1:a|1', 'v:1']);
    expect(identifierKeys({ resourceType: 'Observation', id: 'x' })).toEqual([]);
    expect(identifierTokenKeys([{ value: '1' }, { value: '1' }, {}, { system: null }])).toEqual(['v:1', 'n']);
  });
});
