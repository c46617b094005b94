import type { OutcomeIssue } from '../../http/outcome.js';
import type { IgnoredParameter } from '../../search/parse.js';

/**
 * The warning a searchset's `outcome` entry gives for a parameter the server did not apply, saying
 * why: one it does not support (`not-supported`), or one given without a value, which R4 search
 * gives no meaning (`informational`: the answer is as if it were left out).
 * @see https://hl7.org/fhir/R4/search.html#errors
 */
export function ignoredParameterIssue({ name, reason }: IgnoredParameter, kind: string): OutcomeIssue {
  return reason === 'no-value'
    ? {
        severity: 'warning',
        code: 'informational',
        details: { text: `${kind} ${name} has no value and was ignored` },
        expression: [name],
      }
    : {
        severity: 'warning',
        code: 'not-supported',
        details: { text: `${kind} ${name} is not supported and was ignored` },
        expression: [name],
      };
}
