/**
 * SCIM filter and attribute-path parser (RFC 7644 §3.4.2.2 and the PATCH `path` of §3.5.2).
 *
 * Why hand-written: the npm SCIM libraries measured fail rules our identity providers depend on.
 * `scim2-parse-filter` compares strings case-sensitively whatever the attribute's `caseExact`;
 * SCIMMY mangles attribute-name case in its filter objects and brings its own resource model;
 * `scim-patch` (the PATCH engine they pair with) has shipped prototype-pollution holes through
 * patch paths and inherited properties. The grammar is small, so we parse it to a plain AST that
 * is printed back losslessly (`printScimFilter`) and evaluated schema-aware elsewhere.
 */
import { ScimError, type ScimType } from '../http/http-error.js';

export type ScimCompareOperator = 'eq' | 'ne' | 'co' | 'sw' | 'ew' | 'gt' | 'ge' | 'lt' | 'le';
export type ScimFilterValue = string | number | boolean | null;

/** `[schema URN ":"] attribute ["." subAttribute]`; names keep the case they were written in. */
export interface ScimAttributePath {
  schema?: string;
  attribute: string;
  subAttribute?: string;
}

/**
 * A parsed filter. Inside a `valuePath` filter, paths name sub-attributes of the value-path
 * attribute. Entra's `emails[type eq "work"].value eq "x"` parses as
 * `emails[type eq "work" and value eq "x"]` (one email must satisfy both).
 */
export type ScimFilter =
  | { type: 'compare'; path: ScimAttributePath; operator: ScimCompareOperator; value: ScimFilterValue }
  | { type: 'present'; path: ScimAttributePath }
  | { type: 'and' | 'or'; left: ScimFilter; right: ScimFilter }
  | { type: 'not'; filter: ScimFilter }
  | { type: 'valuePath'; path: ScimAttributePath; filter: ScimFilter };

/** A PATCH target (RFC 7644 §3.5.2): `attrPath`, or `attrPath "[" valFilter "]" ["." subAttr]`. */
export interface ScimPatchPath {
  path: ScimAttributePath;
  filter?: ScimFilter;
  /** Only with `filter`: the sub-attribute after the closing bracket. */
  subAttribute?: string;
}

export interface ScimFilterParseOptions {
  /** Deepest nesting of parentheses, `not` and value paths accepted. @default 32 */
  maxDepth?: number;
  /** Longest filter accepted, in characters. @default 8192 */
  maxLength?: number;
}

const COMPARE_OPERATORS = new Set<string>(['eq', 'ne', 'co', 'sw', 'ew', 'gt', 'ge', 'lt', 'le']);

type Token =
  | { kind: '(' | ')' | '[' | ']'; pos: number }
  | { kind: 'word'; text: string; pos: number }
  | { kind: 'string'; value: string; pos: number }
  | { kind: 'number'; value: number; pos: number }
  | { kind: 'subAttr'; text: string; pos: number };

const WORD = /[A-Za-z0-9:._$-]/;
const NAME = /^\$?[A-Za-z][A-Za-z0-9_-]*$/;
const NUMBER_SOURCE = '-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?';

function invalid(message: string, scimType: ScimType = 'invalidFilter'): ScimError {
  return new ScimError(400, scimType, message);
}

function tokenize(input: string, scimType: ScimType): Token[] {
  // Sticky regex: local, since its lastIndex is state.
  const numberAt = new RegExp(NUMBER_SOURCE, 'y');
  const tokens: Token[] = [];
  let i = 0;
  while (i < input.length) {
    const ch = input[i]!;
    if (ch === ' ' || ch === '\t' || ch === '\n' || ch === '\r') {
      i++;
      continue;
    }
    if (ch === '(' || ch === ')' || ch === '[') {
      tokens.push({ kind: ch, pos: i });
      i++;
      continue;
    }
    if (ch === ']') {
      tokens.push({ kind: ']', pos: i });
      i++;
      // `].subAttr` (PATCH paths and Entra's filter form)
      if (input[i] === '.') {
        const start = i + 1;
        let end = start;
        while (end < input.length && WORD.test(input[end]!)) end++;
        tokens.push({ kind: 'subAttr', text: input.slice(start, end), pos: i });
        i = end;
      }
      continue;
    }
    if (ch === '"') {
      let end = i + 1;
      while (end < input.length && input[end] !== '"') end += input[end] === '\\' ? 2 : 1;
      if (end >= input.length) throw invalid(`Unterminated string at position ${i}`, scimType);
      const raw = input.slice(i, end + 1);
      let value: unknown;
      try {
        value = JSON.parse(raw);
      } catch {
        throw invalid(`Invalid string literal at position ${i}`, scimType);
      }
      tokens.push({ kind: 'string', value: value as string, pos: i });
      i = end + 1;
      continue;
    }
    if (ch === '-' || (ch >= '0' && ch <= '9')) {
      numberAt.lastIndex = i;
      const match = numberAt.exec(input);
      const end = match ? i + match[0].length : i;
      if (match && (end >= input.length || !WORD.test(input[end]!))) {
        tokens.push({ kind: 'number', value: Number(match[0]), pos: i });
        i = end;
        continue;
      }
    }
    if (WORD.test(ch)) {
      let end = i;
      while (end < input.length && WORD.test(input[end]!)) end++;
      const text = input.slice(i, end);
      tokens.push({ kind: 'word', text, pos: i });
      i = end;
      continue;
    }
    throw invalid(`Unexpected character ${JSON.stringify(ch)} at position ${i}`, scimType);
  }
  return tokens;
}

/** Splits `urn:…:User:name.givenName` into schema URN, attribute and sub-attribute. */
function splitAttributePath(text: string, scimType: ScimType): ScimAttributePath {
  let schema: string | undefined;
  let rest = text;
  const colon = text.lastIndexOf(':');
  if (colon >= 0) {
    schema = text.slice(0, colon);
    rest = text.slice(colon + 1);
    if (!/^urn:[A-Za-z0-9][A-Za-z0-9-]*:[^\s]+$/i.test(schema))
      throw invalid(`Invalid schema URN in ${JSON.stringify(text)}`, scimType);
  }
  const parts = rest.split('.');
  if (parts.length > 2 || !parts.every((p) => NAME.test(p))) {
    throw invalid(`Invalid attribute path ${JSON.stringify(text)}`, scimType);
  }
  const path: ScimAttributePath = { attribute: parts[0]! };
  if (schema !== undefined) path.schema = schema;
  if (parts[1] !== undefined) path.subAttribute = parts[1];
  return path;
}

class Parser {
  private index = 0;
  private depth = 0;
  constructor(
    private readonly tokens: Token[],
    private readonly maxDepth: number,
    private readonly scimType: ScimType,
  ) {}

  private peek(): Token | undefined {
    return this.tokens[this.index];
  }

  private next(): Token | undefined {
    return this.tokens[this.index++];
  }

  private fail(message: string): never {
    const token = this.peek();
    throw invalid(
      token ? `${message} at position ${token.pos}` : `${message} at end of filter`,
      this.scimType,
    );
  }

  private isWord(token: Token | undefined, word: string): boolean {
    return token?.kind === 'word' && token.text.toLowerCase() === word;
  }

  private enter(): void {
    if (++this.depth > this.maxDepth) this.fail('Filter nested too deeply');
  }

  atEnd(): boolean {
    return this.index >= this.tokens.length;
  }

  expectEnd(): void {
    if (!this.atEnd()) this.fail('Unexpected token');
  }

  parseFilter(inValuePath: boolean): ScimFilter {
    let left = this.parseAnd(inValuePath);
    while (this.isWord(this.peek(), 'or')) {
      this.next();
      left = { type: 'or', left, right: this.parseAnd(inValuePath) };
    }
    return left;
  }

  private parseAnd(inValuePath: boolean): ScimFilter {
    let left = this.parseUnary(inValuePath);
    while (this.isWord(this.peek(), 'and')) {
      this.next();
      left = { type: 'and', left, right: this.parseUnary(inValuePath) };
    }
    return left;
  }

  private parseGroup(inValuePath: boolean): ScimFilter {
    this.enter();
    this.next(); // (
    const inner = this.parseFilter(inValuePath);
    if (this.next()?.kind !== ')') {
      this.index--;
      this.fail('Expected ")"');
    }
    this.depth--;
    return inner;
  }

  private parseUnary(inValuePath: boolean): ScimFilter {
    const token = this.peek();
    if (!token) this.fail('Expected an expression');
    if (token.kind === '(') return this.parseGroup(inValuePath);
    if (this.isWord(token, 'not') && this.tokens[this.index + 1]?.kind === '(') {
      this.next();
      this.enter();
      const filter = this.parseGroup(inValuePath);
      this.depth--;
      return { type: 'not', filter };
    }
    if (token.kind !== 'word') this.fail('Expected an attribute path');
    this.next();
    const path = splitAttributePath(token.text, this.scimType);
    if (this.peek()?.kind === '[') {
      if (inValuePath) this.fail('Value paths cannot be nested');
      if (path.subAttribute !== undefined)
        this.fail('A value path applies to an attribute, not a sub-attribute');
      this.enter();
      this.next();
      const filter = this.parseFilter(true);
      if (this.next()?.kind !== ']') {
        this.index--;
        this.fail('Expected "]"');
      }
      this.depth--;
      const after = this.peek();
      if (after?.kind === 'subAttr') {
        // Entra: `emails[type eq "work"].value eq "x"` = one email satisfying both.
        this.next();
        if (!NAME.test(after.text)) this.fail('Invalid sub-attribute');
        const inner = this.parseComparison({ attribute: after.text });
        return { type: 'valuePath', path, filter: { type: 'and', left: filter, right: inner } };
      }
      return { type: 'valuePath', path, filter };
    }
    if (inValuePath && (path.schema !== undefined || path.subAttribute !== undefined)) {
      this.fail('Inside a value path, name a sub-attribute only');
    }
    return this.parseComparison(path);
  }

  private parseComparison(path: ScimAttributePath): ScimFilter {
    const opToken = this.next();
    if (opToken?.kind !== 'word') {
      this.index--;
      this.fail('Expected an operator');
    }
    const operator = opToken.text.toLowerCase();
    if (operator === 'pr') return { type: 'present', path };
    if (!COMPARE_OPERATORS.has(operator)) {
      this.index--;
      this.fail(`Unknown operator ${JSON.stringify(opToken.text)}`);
    }
    const valueToken = this.next();
    let value: ScimFilterValue;
    if (valueToken?.kind === 'string' || valueToken?.kind === 'number') value = valueToken.value;
    else if (valueToken?.kind === 'word' && /^(true|false|null)$/i.test(valueToken.text)) {
      const lower = valueToken.text.toLowerCase();
      value = lower === 'null' ? null : lower === 'true';
    } else {
      this.index--;
      this.fail('Expected a value (string, number, true, false or null)');
    }
    return { type: 'compare', path, operator: operator as ScimCompareOperator, value };
  }

  parsePatchPath(): ScimPatchPath {
    const token = this.next();
    if (token?.kind !== 'word') {
      this.index--;
      this.fail('Expected an attribute path');
    }
    const path = splitAttributePath(token.text, this.scimType);
    if (this.peek()?.kind !== '[') return { path };
    if (path.subAttribute !== undefined)
      this.fail('A value path applies to an attribute, not a sub-attribute');
    this.enter();
    this.next();
    const filter = this.parseFilter(true);
    if (this.next()?.kind !== ']') {
      this.index--;
      this.fail('Expected "]"');
    }
    this.depth--;
    const after = this.peek();
    if (after?.kind === 'subAttr') {
      this.next();
      if (!NAME.test(after.text)) this.fail('Invalid sub-attribute');
      return { path, filter, subAttribute: after.text };
    }
    return { path, filter };
  }
}

function checkInput(input: unknown, options: ScimFilterParseOptions | undefined, scimType: ScimType): string {
  if (typeof input !== 'string' || input.trim() === '') throw invalid('Empty expression', scimType);
  if (input.length > (options?.maxLength ?? 8192)) throw invalid('Expression too long', scimType);
  return input;
}

/**
 * Parses a SCIM filter (RFC 7644 §3.4.2.2). Attribute names and operators are case-insensitive;
 * `and` binds tighter than `or`; `not` needs parentheses. Throws `ScimError(400, 'invalidFilter')`
 * on any syntax error, trailing input, unknown operator, unterminated string or over-deep nesting.
 */
export function parseScimFilter(input: string, options?: ScimFilterParseOptions): ScimFilter {
  const text = checkInput(input, options, 'invalidFilter');
  const parser = new Parser(tokenize(text, 'invalidFilter'), options?.maxDepth ?? 32, 'invalidFilter');
  const filter = parser.parseFilter(false);
  parser.expectEnd();
  return filter;
}

/** Parses a PATCH operation `path` (RFC 7644 §3.5.2); errors are `ScimError(400, 'invalidPath')`. */
export function parseScimPath(input: string, options?: ScimFilterParseOptions): ScimPatchPath {
  const text = checkInput(input, options, 'invalidPath');
  const parser = new Parser(tokenize(text, 'invalidPath'), options?.maxDepth ?? 32, 'invalidPath');
  const path = parser.parsePatchPath();
  parser.expectEnd();
  return path;
}

/**
 * Parses one plain attribute path (`userName`, `name.givenName`, `urn:…:User:manager.value`) as used
 * in `attributes`, `excludedAttributes` and `sortBy`; errors are `ScimError(400, scimType)`.
 */
export function parseScimAttributePath(
  input: string,
  scimType: ScimType = 'invalidValue',
): ScimAttributePath {
  const text = input.trim();
  if (text === '' || !/^[A-Za-z0-9:._$-]+$/.test(text))
    throw invalid(`Invalid attribute path ${JSON.stringify(input)}`, scimType);
  return splitAttributePath(text, scimType);
}

/** The attribute path as written in a filter. */
export function printScimAttributePath(path: ScimAttributePath): string {
  const name = path.subAttribute !== undefined ? `${path.attribute}.${path.subAttribute}` : path.attribute;
  return path.schema !== undefined ? `${path.schema}:${name}` : name;
}

function printValue(value: ScimFilterValue): string {
  return value === null || typeof value === 'boolean' ? String(value) : JSON.stringify(value);
}

/**
 * Prints a filter back to SCIM syntax, adding parentheses only where precedence needs them, so
 * `parseScimFilter(printScimFilter(ast))` equals `ast`.
 */
export function printScimFilter(filter: ScimFilter): string {
  switch (filter.type) {
    case 'compare':
      return `${printScimAttributePath(filter.path)} ${filter.operator} ${printValue(filter.value)}`;
    case 'present':
      return `${printScimAttributePath(filter.path)} pr`;
    case 'not':
      return `not (${printScimFilter(filter.filter)})`;
    case 'valuePath':
      return `${printScimAttributePath(filter.path)}[${printScimFilter(filter.filter)}]`;
    case 'and':
    case 'or': {
      // Left-associative: a same-operator chain on the left needs no parentheses; `or` inside
      // `and`, and any logical node on the right, does.
      const needsLeft = filter.left.type === 'or' && filter.type === 'and';
      const needsRight = filter.right.type === 'and' || filter.right.type === 'or';
      const left = printScimFilter(filter.left);
      const right = printScimFilter(filter.right);
      const rightNeedsParens = needsRight && !(filter.type === 'or' && filter.right.type === 'and');
      return `${needsLeft ? `(${left})` : left} ${filter.type} ${rightNeedsParens ? `(${right})` : right}`;
    }
  }
}
