/*
 * FHIR search value escaping: `\,` `\|` `\$` and `\\` stand for the character itself; unescaped,
 * `,` separates OR values, `|` the parts of a token, quantity or reference, `$` the parts of a
 * composite.
 * @see https://hl7.org/fhir/R4/search.html#escaping
 */

/** Splits `value` on each `separator` not escaped by a backslash; the parts stay escaped. */
export function splitUnescaped(value: string, separator: ',' | '|' | '$'): string[] {
  const parts: string[] = [];
  let start = 0;
  for (let i = 0; i < value.length; i++) {
    const c = value[i];
    if (c === '\\') i++;
    else if (c === separator) {
      parts.push(value.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(value.slice(start));
  return parts;
}

/** Removes the escaping backslashes of `\,` `\|` `\$` `\\` (others are kept as written). */
export function unescapeValue(value: string): string {
  return value.replace(/\\([,|$\\])/g, '$1');
}
