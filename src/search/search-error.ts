import { PlatformError, type FhirErrorCode } from '../errors.js';

const SEARCH_ERROR_CODES = {
  invalid: 'ERR_FHIR_INVALID',
  'not-supported': 'ERR_FHIR_NOT_SUPPORTED',
  'too-costly': 'ERR_FHIR_TOO_COSTLY',
} as const satisfies Record<string, FhirErrorCode>;

/** Why a search is refused: the OperationOutcome issue code (R4 IssueType) a FHIR router answers it with. */
export type SearchIssueCode = keyof typeof SEARCH_ERROR_CODES;

/**
 * A search the parser or the matcher refuses: a malformed value (`invalid`), a parameter, modifier or
 * chain this server does not answer (`not-supported`), or a search past its cost bounds
 * (`too-costly`). Protocol-free: the FHIR and Bulk Data routers answer it as a 400 OperationOutcome
 * carrying `issueCode`, the message, and `parameter` as the issue's `expression`.
 */
export class SearchParameterError extends PlatformError {
  declare readonly code: (typeof SEARCH_ERROR_CODES)[SearchIssueCode];
  readonly issueCode: SearchIssueCode;
  /** The search parameter at fault, as the request names it (`_sort`, `birthdate:missing`), when one is. */
  readonly parameter?: string;
  constructor(issueCode: SearchIssueCode, message: string, parameter?: string) {
    super(SEARCH_ERROR_CODES[issueCode], message);
    this.issueCode = issueCode;
    if (parameter !== undefined) this.parameter = parameter;
  }
}
