/**
 * The `$import` kick-off body: a `Parameters` resource naming either a Bulk Data export manifest of
 * another server (`manifestUrl`) or NDJSON files (`input`, each with its `type` and `url`), and
 * optionally the source's base URL (`inputSource`) and a bearer token for it (`accessToken`).
 */
import { isResourceType } from '../../common/resource-types.js';
import { invalidParameter, readParameters } from '../../http/fhir-parameters.js';
import type { Principal } from '../../http/principal.js';

/** One NDJSON file to load: resources (`output`) or a Bulk Data `deleted` file of Bundles. */
export interface ImportInput {
  type: string;
  url: string;
  kind: 'output' | 'deleted';
}

/** What an import job runs, persisted as the job's `params` so that any instance can resume it. */
export interface ImportPlan {
  operation: 'import';
  /** The export directory of the manager that created the job (see `ExportPlan.exportDir`). */
  exportDir?: string;
  ownerKind?: Principal['kind'];
  /** The rights of the principal that kicked the job off, which every line is written with. */
  owner: { scopes: string[]; admin: boolean };
  /** A completed export's status URL, whose manifest lists the files. */
  manifestUrl?: string;
  /** The files, when given one by one. */
  inputs?: ImportInput[];
  /** The source's FHIR base URL: its absolute references are made relative. */
  inputSource?: string;
  /** A bearer token for the source, given for this job. */
  accessToken?: string;
}

const IMPORT_PARAMETERS = {
  inputFormat: { type: ['string', 'code'] },
  inputSource: { type: ['uri', 'url'] },
  manifestUrl: { type: ['uri', 'url'] },
  accessToken: { type: 'string' },
  input: {
    repeats: true,
    parts: {
      type: { type: ['code', 'string'], required: true },
      url: { type: ['uri', 'url'], required: true },
    },
  },
} as const;

const NDJSON_FORMATS = new Set(['application/fhir+ndjson', 'application/ndjson', 'ndjson']);

/** What a kick-off asks for, before rights are checked. */
export type ImportRequest = Pick<ImportPlan, 'manifestUrl' | 'inputs' | 'inputSource' | 'accessToken'>;

/**
 * Reads the kick-off body; `urlProblem` judges each URL (scheme, address policy). Every problem is a
 * 400 pointing at the parameter.
 */
export function parseImportRequest(
  body: unknown,
  urlProblem: (url: string) => string | undefined,
  maxInputs: number,
): ImportRequest {
  const read = readParameters(body, IMPORT_PARAMETERS);
  const checkUrl = (item: { value: string; expression: string }, name: string): string => {
    const problem = urlProblem(item.value);
    if (problem) throw invalidParameter(item.expression, `'${name}' ${problem}`);
    return item.value;
  };
  if (read.inputFormat && !NDJSON_FORMATS.has(read.inputFormat.value)) {
    throw invalidParameter(read.inputFormat.expression, "'inputFormat' must be application/fhir+ndjson");
  }
  const request: ImportRequest = {};
  if (read.manifestUrl && read.input.length > 0) {
    throw invalidParameter('Parameters', "Give either 'manifestUrl' or 'input', not both");
  }
  if (!read.manifestUrl && read.input.length === 0) {
    throw invalidParameter(
      'Parameters',
      "Give 'manifestUrl' (an export's status URL) or at least one 'input'",
    );
  }
  if (read.input.length > maxInputs) {
    throw invalidParameter('Parameters', `At most ${maxInputs} 'input' files per import`);
  }
  if (read.manifestUrl) request.manifestUrl = checkUrl(read.manifestUrl, 'manifestUrl');
  if (read.input.length > 0) {
    request.inputs = read.input.map(({ parts }) => {
      if (!isResourceType(parts.type.value))
        throw invalidParameter(parts.type.expression, `'${parts.type.value}' is not an R4 resource type`);
      return { type: parts.type.value, url: checkUrl(parts.url, 'url'), kind: 'output' as const };
    });
  }
  if (read.inputSource) {
    const source = checkUrl(read.inputSource, 'inputSource');
    request.inputSource = source.replace(/\/+$/, '');
  }
  if (read.accessToken) {
    if (read.accessToken.value.trim() === '' || /\s/.test(read.accessToken.value))
      throw invalidParameter(read.accessToken.expression, "'accessToken' must be a token without spaces");
    request.accessToken = read.accessToken.value;
  }
  return request;
}

/** Where an import's data comes from, for its audit events: the manifest URL, or the files' origins. */
export function importSource(plan: Pick<ImportPlan, 'manifestUrl' | 'inputs'>): string {
  if (plan.manifestUrl !== undefined) return plan.manifestUrl;
  return [...new Set((plan.inputs ?? []).map((input) => new URL(input.url).origin))].join(' ');
}
