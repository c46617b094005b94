import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  parseScimFilter,
  parseScimPath,
  printScimFilter,
  type ScimFilter,
  type ScimAttributePath,
} from '../../src/scim/filter-parser.js';
import { ScimError } from '../../src/http/http-error.js';

function scimType(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ScimError);
    expect((err as ScimError).status).toBe(400);
    return (err as ScimError).scimType;
  }
  return 'no error';
}

describe('parseScimFilter', () => {
  it('parses comparisons with case-insensitive operators and JSON literals', () => {
    expect(parseScimFilter('userName Eq "john"')).toEqual({
      type: 'compare',
      path: { attribute: 'userName' },
      operator: 'eq',
      value: 'john',
    });
    expect(parseScimFilter('meta.lastModified gt "2011-05-13T04:42:34Z"')).toMatchObject({
      path: { attribute: 'meta', subAttribute: 'lastModified' },
      operator: 'gt',
    });
    expect(parseScimFilter('active eq true')).toMatchObject({ value: true });
    expect(parseScimFilter('active eq FALSE')).toMatchObject({ value: false });
    expect(parseScimFilter('x eq null')).toMatchObject({ value: null });
    expect(parseScimFilter('x gt -1.5e3')).toMatchObject({ value: -1500 });
    expect(parseScimFilter('title pr')).toEqual({ type: 'present', path: { attribute: 'title' } });
    expect(parseScimFilter('userName eq "a\\"b\\\\c\\u00e9"')).toMatchObject({ value: 'a"b\\cé' });
  });

  it('gives and precedence over or, and honours parentheses and not', () => {
    const f = parseScimFilter('a pr or b pr and c pr');
    expect(f).toMatchObject({ type: 'or', right: { type: 'and' } });
    const g = parseScimFilter('(a pr or b pr) and c pr');
    expect(g).toMatchObject({ type: 'and', left: { type: 'or' } });
    const h = parseScimFilter('not (a pr) AND b pr');
    expect(h).toMatchObject({ type: 'and', left: { type: 'not' } });
  });

  it('parses value paths, including the Entra form with a trailing sub-attribute', () => {
    expect(parseScimFilter('emails[type eq "work" and value co "@x.org"]')).toMatchObject({
      type: 'valuePath',
      path: { attribute: 'emails' },
      filter: { type: 'and' },
    });
    expect(parseScimFilter('emails[type eq "work"].value eq "a@x.org"')).toEqual({
      type: 'valuePath',
      path: { attribute: 'emails' },
      filter: {
        type: 'and',
        left: { type: 'compare', path: { attribute: 'type' }, operator: 'eq', value: 'work' },
        right: { type: 'compare', path: { attribute: 'value' }, operator: 'eq', value: 'a@x.org' },
      },
    });
  });

  it('parses fully qualified attribute names', () => {
    expect(parseScimFilter('urn:ietf:params:scim:schemas:core:2.0:User:userName sw "J"')).toMatchObject({
      path: { schema: 'urn:ietf:params:scim:schemas:core:2.0:User', attribute: 'userName' },
    });
    expect(
      parseScimFilter('urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager.value eq "1"'),
    ).toMatchObject({
      path: {
        schema: 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User',
        attribute: 'manager',
        subAttribute: 'value',
      },
    });
  });

  it.each([
    [''],
    ['userName'],
    ['userName eq'],
    ['userName eq "x" extra'],
    ['userName foo "x"'],
    ['userName eq "unterminated'],
    ['userName eq "bad\\escape"'],
    ['userName eq john'],
    ['(userName eq "x"'],
    ['userName eq "x")'],
    ['emails[type eq "work"'],
    ['emails[type eq "work"]]'],
    ['emails[addresses[type eq "x"]]'],
    ['not userName eq "x"'],
    ['userName eq "x" and'],
    ['a.b.c eq "x"'],
    ['foo:bar eq "x"'],
    ['userName eq "x" & b pr'],
    ['userName eq 01'],
    ['emails[type eq "work"].value'],
  ])('rejects %j as invalidFilter', (input) => {
    expect(scimType(() => parseScimFilter(input))).toBe('invalidFilter');
  });

  it('rejects over-deep nesting and over-long input', () => {
    const deep = `${'('.repeat(40)}a pr${')'.repeat(40)}`;
    expect(scimType(() => parseScimFilter(deep))).toBe('invalidFilter');
    const nots = `${'not ('.repeat(40)}a pr${')'.repeat(40)}`;
    expect(scimType(() => parseScimFilter(nots))).toBe('invalidFilter');
    expect(scimType(() => parseScimFilter(`userName eq "${'x'.repeat(10_000)}"`))).toBe('invalidFilter');
    expect(parseScimFilter(`${'('.repeat(20)}a pr${')'.repeat(20)}`)).toMatchObject({ type: 'present' });
  });
});

describe('parseScimPath', () => {
  it('parses attribute, sub-attribute, value-path and URN paths', () => {
    expect(parseScimPath('name.givenName')).toEqual({
      path: { attribute: 'name', subAttribute: 'givenName' },
    });
    expect(parseScimPath('emails[type eq "work"].value')).toMatchObject({
      path: { attribute: 'emails' },
      filter: { type: 'compare' },
      subAttribute: 'value',
    });
    expect(parseScimPath('urn:ietf:params:scim:schemas:extension:enterprise:2.0:User:manager')).toMatchObject(
      {
        path: { attribute: 'manager', schema: 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User' },
      },
    );
  });

  it.each([['emails[type eq "work"'], ['name.'], ['emails[type eq "work"] x'], ['a b'], ['']])(
    'rejects %j as invalidPath',
    (input) => {
      expect(scimType(() => parseScimPath(input))).toBe('invalidPath');
    },
  );
});

const name = fc.stringMatching(/^[A-Za-z][A-Za-z0-9_-]{0,8}$/).filter((n) => !/^(and|or|not)$/i.test(n));
const attrPath: fc.Arbitrary<ScimAttributePath> = fc
  .record(
    {
      schema: fc.constantFrom(
        'urn:ietf:params:scim:schemas:core:2.0:User',
        'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User',
      ),
      attribute: name,
      subAttribute: name,
    },
    { requiredKeys: ['attribute'] },
  )
  .map((p) => p as ScimAttributePath);
const literal = fc.oneof(
  fc.string(),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((n) => !Object.is(n, -0)),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
);
const operator = fc.constantFrom('eq', 'ne', 'co', 'sw', 'ew', 'gt', 'ge', 'lt', 'le' as const);

function leaf(path: fc.Arbitrary<ScimAttributePath>): fc.Arbitrary<ScimFilter> {
  return fc.oneof(
    fc.record({ type: fc.constant('compare' as const), path, operator, value: literal }),
    fc.record({ type: fc.constant('present' as const), path }),
  );
}

function logical(inner: fc.Arbitrary<ScimFilter>, depth: number): fc.Arbitrary<ScimFilter> {
  if (depth === 0) return inner;
  const sub = logical(inner, depth - 1);
  return fc.oneof(
    { weight: 2, arbitrary: inner },
    {
      weight: 1,
      arbitrary: fc.record({ type: fc.constantFrom('and' as const, 'or' as const), left: sub, right: sub }),
    },
    { weight: 1, arbitrary: fc.record({ type: fc.constant('not' as const), filter: sub }) },
  );
}

const filterArb: fc.Arbitrary<ScimFilter> = logical(
  fc.oneof(
    { weight: 3, arbitrary: leaf(attrPath) },
    {
      weight: 1,
      arbitrary: fc.record({
        type: fc.constant('valuePath' as const),
        path: name.map((attribute) => ({ attribute })),
        filter: logical(leaf(name.map((attribute) => ({ attribute }))), 2),
      }),
    },
  ),
  4,
);

describe('filter properties', () => {
  it('parse(print(ast)) equals ast', () => {
    fc.assert(
      fc.property(filterArb, (ast) => {
        expect(parseScimFilter(printScimFilter(ast))).toEqual(ast);
      }),
      { numRuns: 500 },
    );
  });

  it('never throws anything but a 400 invalidFilter on arbitrary input', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 80 }), (input) => {
        try {
          parseScimFilter(input);
        } catch (err) {
          expect(err).toBeInstanceOf(ScimError);
          expect((err as ScimError).scimType).toBe('invalidFilter');
        }
      }),
      { numRuns: 1000 },
    );
  });
});
