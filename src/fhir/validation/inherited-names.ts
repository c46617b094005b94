import type { FhirResource } from '../../storage/types.js';
import type { OutcomeIssue } from '../../http/outcome.js';

/**
 * Names every plain object inherits: `__proto__`, `constructor`, `toString`, `valueOf`,
 * `hasOwnProperty`, … No FHIR element has one of them, but a validator that looks element names up
 * in a plain object finds them there and so lets them through.
 */
const INHERITED_NAMES: ReadonlySet<string> = new Set(Object.getOwnPropertyNames(Object.prototype));

/** True when `key` (or the element it extends, for a `_name` primitive extension key) is an inherited name. */
export function isInheritedName(key: string): boolean {
  return INHERITED_NAMES.has(key) || (key.startsWith('_') && INHERITED_NAMES.has(key.slice(1)));
}

/**
 * One `structure` error per element of `resource` (at any depth, `contained` included) named like
 * an `Object.prototype` property, in the shape the R4 validator gives unknown elements
 * (`Invalid additional property "x"` at `Patient.name[0].x`). Walks with an explicit stack.
 */
export function inheritedNameIssues(resource: FhirResource): OutcomeIssue[] {
  // Almost every resource has none: a scan without paths or allocations answers that first.
  if (!hasInheritedName(resource)) return [];
  const issues: OutcomeIssue[] = [];
  const stack: [unknown, string][] = [[resource, resource.resourceType]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [value, path] = next;
    if (value === null || typeof value !== 'object') continue;
    if (Array.isArray(value)) {
      for (let i = value.length - 1; i >= 0; i--) stack.push([value[i], `${path}[${i}]`]);
      continue;
    }
    const keys = Object.keys(value);
    for (let i = keys.length - 1; i >= 0; i--) {
      const key = keys[i]!;
      if (isInheritedName(key)) {
        issues.push({
          severity: 'error',
          code: 'structure',
          details: { text: `Invalid additional property ${JSON.stringify(key)}` },
          expression: [`${path}.${key}`],
        });
      } else {
        stack.push([(value as Record<string, unknown>)[key], `${path}.${key}`]);
      }
    }
  }
  return issues;
}

/** True when some key of `value`, at any depth, is an inherited name. Walks with an explicit stack of values. */
function hasInheritedName(value: unknown): boolean {
  const stack: unknown[] = [value];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    if (next === null || typeof next !== 'object') continue;
    if (Array.isArray(next)) {
      for (const item of next) if (item !== null && typeof item === 'object') stack.push(item);
      continue;
    }
    for (const key in next) {
      if (isInheritedName(key)) return true;
      const child = (next as Record<string, unknown>)[key];
      if (child !== null && typeof child === 'object') stack.push(child);
    }
  }
  return false;
}
