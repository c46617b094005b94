import type { Server } from 'node:http';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSearchRegistry, type SearchRegistry } from '../../src/search/definitions.js';
import { createPlatformApp, FHIR_JSON, type PlatformTestApp } from '../helpers/platform-app.js';

// Walks GET /metadata and tries every interaction, operation and search parameter it lists (once per
// resource type, one value each, on a project with one resource of every type), through the whole
// platform. A listed capability that answers 405, 501, a 5xx, or an "unknown / unsupported"
// OperationOutcome is a lie of the statement; since every value sent is a valid one, any other
// refusal (4xx) fails the walk too, naming each request. About 20 s on an idle machine (some
// 5,500 requests); each part may take up to 120 s on a loaded one.
const FHIR = '/fhir/R4';
const ID = 'walk-1';

interface Capability {
  type: string;
  interaction: { code: string }[];
  searchParam?: { name: string; type: string }[];
  searchInclude?: string[];
  searchRevInclude?: string[];
  operation?: { name: string; definition: string }[];
  conditionalCreate?: boolean;
  conditionalUpdate?: boolean;
  conditionalDelete?: string;
  conditionalRead?: string;
}
interface Rest {
  resource: Capability[];
  interaction: { code: string }[];
  searchParam: { name: string }[];
  operation?: { name: string; definition: string }[];
}

/**
 * The IG canonical of a definition: the bulk export operations point at this server's own
 * definitions (`[base]/OperationDefinition/bulk-patient-export`), based on the IG's.
 */
const canonicalOf = (definition: string): string =>
  definition
    .replace(
      /^.*\/OperationDefinition\/bulk-(export|patient-export|group-export)$/,
      'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/$1',
    )
    .replace(/^.*\/OperationDefinition\/bulk-import$/, IMPORT);

/** The server's own `$import` (no IG defines it), as the walk names it. */
const IMPORT = 'urn:fhir-platform-kit:OperationDefinition/import';

/** How each operation this server may list is invoked, by its definition's canonical URL. */
const OPERATION_LEVELS: Record<string, 'system' | 'type' | 'instance' | 'type+instance'> = {
  'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/export': 'system',
  [IMPORT]: 'system',
  'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/patient-export': 'type',
  'http://hl7.org/fhir/uv/bulkdata/OperationDefinition/group-export': 'instance',
  'http://hl7.org/fhir/OperationDefinition/Patient-everything': 'type+instance',
  'http://hl7.org/fhir/OperationDefinition/Resource-validate': 'type+instance',
  'http://hl7.org/fhir/OperationDefinition/ValueSet-expand': 'type+instance',
  'http://hl7.org/fhir/OperationDefinition/ValueSet-validate-code': 'type+instance',
  'http://hl7.org/fhir/OperationDefinition/CodeSystem-lookup': 'type',
  'http://hl7.org/fhir/OperationDefinition/CodeSystem-validate-code': 'type+instance',
  'http://hl7.org/fhir/OperationDefinition/CodeSystem-subsumes': 'type+instance',
};

const GENDER = 'http://hl7.org/fhir/administrative-gender';
const WALK_SYSTEM = 'http://example.org/walk';

/** The query of an operation that needs parameters, at the type and the instance level. */
const OPERATION_QUERIES: Record<string, { type: string; instance: string }> = {
  'http://hl7.org/fhir/OperationDefinition/ValueSet-expand': {
    type: `url=http://hl7.org/fhir/ValueSet/administrative-gender`,
    instance: '',
  },
  'http://hl7.org/fhir/OperationDefinition/ValueSet-validate-code': {
    type: `url=http://hl7.org/fhir/ValueSet/administrative-gender&system=${GENDER}&code=male`,
    instance: `system=${WALK_SYSTEM}&code=a`,
  },
  'http://hl7.org/fhir/OperationDefinition/CodeSystem-lookup': {
    type: `system=${GENDER}&code=male`,
    instance: '',
  },
  'http://hl7.org/fhir/OperationDefinition/CodeSystem-validate-code': {
    type: `url=${GENDER}&code=male`,
    instance: 'code=a',
  },
  'http://hl7.org/fhir/OperationDefinition/CodeSystem-subsumes': {
    type: `system=${GENDER}&codeA=male&codeB=male`,
    instance: 'codeA=a&codeB=a',
  },
};

/** The instances the terminology operations are invoked on: a code system of one code, and a value set of it. */
const WALK_TERMINOLOGY = [
  {
    resourceType: 'CodeSystem',
    id: ID,
    url: WALK_SYSTEM,
    status: 'active',
    content: 'complete',
    concept: [{ code: 'a', display: 'A' }],
  },
  {
    resourceType: 'ValueSet',
    id: ID,
    url: `${WALK_SYSTEM}/vs`,
    status: 'active',
    compose: { include: [{ system: WALK_SYSTEM }] },
  },
];

/** A search value of a parameter type (the same for every parameter of that type). */
function valueOf(type: string, target?: string): string {
  switch (type) {
    case 'number':
      return '1';
    case 'date':
      return 'ge2020-01-01';
    case 'string':
      return 'a';
    case 'token':
      return 'http://example.org|x';
    case 'reference':
      return `${target ?? 'Patient'}/${ID}`;
    case 'quantity':
      return '1||mg';
    case 'uri':
      return 'http://example.org/x';
    default:
      return 'x';
  }
}

function searchValue(registry: SearchRegistry, resourceType: string, name: string, type: string): string {
  if (name === '_id') return ID;
  const def = registry.get(resourceType, name);
  if (type === 'composite' && def) return def.components.map((c) => valueOf(c.type)).join('$');
  return valueOf(type, def?.targets[0]);
}

describe('the CapabilityStatement, walked', () => {
  let ctx: PlatformTestApp;
  let server: Server;
  let auth: string;
  let rest: Rest;
  let registry: SearchRegistry;
  const failures: string[] = [];

  beforeAll(async () => {
    ctx = await createPlatformApp();
    const projectId = await ctx.initProject('Walk');
    await ctx.storage.updateProject(projectId, { strictMode: false });
    const client = await ctx.newClient(projectId, {
      name: 'walker',
      scope: 'system/*.* system/AuditEvent.read',
      admin: true,
    });
    auth = await ctx.bearer(client.id, client.secret);
    server = ctx.app.listen(0);
    registry = await loadSearchRegistry();
    const metadata = await request(server).get(`${FHIR}/metadata`);
    expect(metadata.status).toBe(200);
    rest = (metadata.body as { rest: Rest[] }).rest[0]!;
    // One resource of every type (written straight to the store: the walk is about the API).
    await ctx.storage.writeResources(
      projectId,
      rest.resource.map((c) => ({ op: 'update' as const, resource: { resourceType: c.type, id: ID } })),
    );
  });
  afterAll(async () => {
    if (server) await new Promise((resolve) => server.close(resolve));
    await ctx?.close();
  });

  /** Sends a request and records it as a failure when it answers as an unsupported capability would. */
  async function attempt(
    what: string,
    send: (agent: request.Agent) => request.Test,
  ): Promise<request.Response> {
    const res = await send(request.agent(server).set('Authorization', auth));
    const body = res.body as {
      resourceType?: string;
      issue?: { code?: string; diagnostics?: string; details?: { text?: string } }[];
    };
    const issues = body.resourceType === 'OperationOutcome' ? (body.issue ?? []) : [];
    const text = issues.map((i) => `${i.code ?? ''} ${i.details?.text ?? i.diagnostics ?? ''}`).join('; ');
    // The values are valid ones, so any refusal is a failure; these kinds say the capability is not there.
    const unsupported =
      res.status === 405 ||
      res.status === 501 ||
      res.status >= 500 ||
      issues.some((i) => i.code === 'not-supported') ||
      /unknown|unsupported|not supported/i.test(text);
    if (res.status >= 400)
      failures.push(`${what}: ${res.status}${unsupported ? ' (unsupported)' : ''} ${text}`);
    return res;
  }

  const json = (test: request.Test, body: unknown): request.Test =>
    test.type(FHIR_JSON).send(JSON.stringify(body));

  it('answers every interaction of every type', async () => {
    for (const cap of rest.resource) {
      const { type } = cap;
      for (const { code } of cap.interaction) {
        const what = `${type} ${code}`;
        switch (code) {
          case 'read':
            await attempt(what, (a) => a.get(`${FHIR}/${type}/${ID}`));
            break;
          case 'vread': {
            const current = await request(server).get(`${FHIR}/${type}/${ID}`).set('Authorization', auth);
            const version = (current.body as { meta?: { versionId?: string } }).meta?.versionId ?? '1';
            await attempt(what, (a) => a.get(`${FHIR}/${type}/${ID}/_history/${version}`));
            break;
          }
          case 'update':
            await attempt(what, (a) => json(a.put(`${FHIR}/${type}/${ID}`), { resourceType: type, id: ID }));
            break;
          case 'patch':
            await attempt(what, (a) =>
              a
                .patch(`${FHIR}/${type}/${ID}`)
                .type('application/json-patch+json')
                .send(JSON.stringify([{ op: 'add', path: '/language', value: 'en' }])),
            );
            break;
          case 'create':
            await attempt(what, (a) => json(a.post(`${FHIR}/${type}`), { resourceType: type }));
            break;
          case 'delete': {
            const made = await json(
              request(server).put(`${FHIR}/${type}/walk-del`).set('Authorization', auth),
              {
                resourceType: type,
                id: 'walk-del',
              },
            );
            expect(made.status, `${type} PUT walk-del`).toBeLessThan(300);
            await attempt(what, (a) => a.delete(`${FHIR}/${type}/walk-del`));
            break;
          }
          case 'search-type':
            await attempt(what, (a) => a.get(`${FHIR}/${type}`));
            break;
          case 'history-instance':
            await attempt(what, (a) => a.get(`${FHIR}/${type}/${ID}/_history`));
            break;
          case 'history-type':
            await attempt(what, (a) => a.get(`${FHIR}/${type}/_history`));
            break;
          default:
            failures.push(`${what}: the walk does not know this interaction`);
        }
      }
      if (cap.conditionalCreate) {
        await attempt(`${type} conditional create`, (a) =>
          json(a.post(`${FHIR}/${type}`).set('If-None-Exist', `_id=${ID}`), { resourceType: type }),
        );
      }
      if (cap.conditionalUpdate) {
        await attempt(`${type} conditional update`, (a) =>
          json(a.put(`${FHIR}/${type}?_id=${ID}`), { resourceType: type, id: ID }),
        );
      }
      if (cap.conditionalDelete && cap.conditionalDelete !== 'not-supported') {
        await attempt(`${type} conditional delete`, (a) => a.delete(`${FHIR}/${type}?_id=walk-none`));
      }
      if (cap.conditionalRead && cap.conditionalRead !== 'not-supported') {
        await attempt(`${type} conditional read`, (a) =>
          a.get(`${FHIR}/${type}/${ID}`).set('If-None-Match', 'W/"0"'),
        );
      }
    }
    expect(failures).toEqual([]);
  });

  it('answers every search parameter, _include and _revinclude of every type', async () => {
    const revincludes = new Set<string>();
    for (const cap of rest.resource) {
      const { type } = cap;
      for (const param of cap.searchParam ?? []) {
        const value = searchValue(registry, type, param.name, param.type);
        await attempt(`${type}?${param.name}=${value}`, (a) =>
          a.get(`${FHIR}/${type}`).query({ [param.name]: value }),
        );
      }
      for (const include of cap.searchInclude ?? []) {
        await attempt(`${type}?_include=${include}`, (a) =>
          a.get(`${FHIR}/${type}`).query({ _include: include }),
        );
      }
      // A `_revinclude` value names a parameter of its source type: each is tried once, on the first
      // type that lists it (Provenance:target alone is listed on every type).
      for (const include of (cap.searchRevInclude ?? []).filter((v) => !revincludes.has(v))) {
        revincludes.add(include);
        await attempt(`${type}?_revinclude=${include}`, (a) =>
          a.get(`${FHIR}/${type}`).query({ _revinclude: include }),
        );
      }
    }
    expect(failures).toEqual([]);
  });

  it('answers the server-wide search parameters and interactions', async () => {
    const common: Record<string, string> = {
      _count: '1',
      _offset: '1',
      _sort: '-_lastUpdated',
      _summary: 'true',
      _elements: 'id',
      _total: 'accurate',
      _include: 'Observation:subject',
      _revinclude: 'Observation:subject',
    };
    for (const { name } of rest.searchParam) {
      if (name === '_has') {
        await attempt('Patient?_has', (a) =>
          a.get(`${FHIR}/Patient`).query({ '_has:Observation:subject:_id': ID }),
        );
        continue;
      }
      const value = common[name];
      if (value === undefined) {
        failures.push(`${name}: the walk has no value for this parameter`);
        continue;
      }
      const type = name === '_include' ? 'Observation' : 'Patient';
      await attempt(`${type}?${name}=${value}`, (a) => a.get(`${FHIR}/${type}`).query({ [name]: value }));
    }
    for (const { code } of rest.interaction) {
      if (code === 'batch' || code === 'transaction') {
        const entry =
          code === 'batch'
            ? [{ request: { method: 'GET', url: `Patient/${ID}` } }]
            : [
                {
                  resource: { resourceType: 'Basic', code: { text: 'x' } },
                  request: { method: 'POST', url: 'Basic' },
                },
              ];
        await attempt(code, (a) => json(a.post(FHIR), { resourceType: 'Bundle', type: code, entry }));
      } else if (code === 'history-system') {
        await attempt(code, (a) => a.get(`${FHIR}/_history`));
      } else if (code === 'search-system') {
        await attempt(code, (a) => a.get(FHIR).query({ _id: ID }));
      } else {
        failures.push(`${code}: the walk does not know this interaction`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('answers every operation it lists, at the level its definition says', async () => {
    // Written again: the interactions' updates left every resource empty.
    for (const resource of WALK_TERMINOLOGY) {
      const put = await json(
        request(server).put(`${FHIR}/${resource.resourceType}/${ID}`).set('Authorization', auth),
        resource,
      );
      expect(put.status).toBeLessThan(300);
    }
    const invoke = async (what: string, path: string, own: string): Promise<void> => {
      const definition = canonicalOf(own);
      const bulk = definition.includes('/bulkdata/') || definition === IMPORT;
      const level = path.includes(`/${ID}/`) ? 'instance' : 'type';
      const query = OPERATION_QUERIES[definition]?.[level] ?? '';
      const res = await attempt(what, (a) => {
        if (definition.endsWith('/Resource-validate')) {
          // The resource to validate is the body (R4 allows it bare, without Parameters).
          const type = path.slice(0, path.indexOf('/'));
          return json(a.post(`${FHIR}/${path}`), {
            resourceType: type,
            ...(level === 'instance' ? { id: ID } : {}),
          });
        }
        if (definition === IMPORT) {
          // One file nobody serves: the job is accepted, then cancelled below.
          const input = [
            { name: 'type', valueCode: 'Patient' },
            { name: 'url', valueUri: 'http://127.0.0.1:9/walk.ndjson' },
          ];
          return json(a.post(`${FHIR}/${path}`).set('Prefer', 'respond-async'), {
            resourceType: 'Parameters',
            parameter: [{ name: 'input', part: input }],
          });
        }
        const test = a.get(`${FHIR}/${path}${query ? `?${query}` : ''}`);
        return bulk ? test.set('Prefer', 'respond-async').set('Accept', FHIR_JSON) : test;
      });
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(bulk ? 202 : 200);
      // Cancelled at once: the next kick-off of the project is not refused as a duplicate.
      const status = res.headers['content-location'];
      if (bulk && status) await request(server).delete(new URL(status).pathname).set('Authorization', auth);
    };
    for (const op of rest.operation ?? []) {
      const level = OPERATION_LEVELS[canonicalOf(op.definition)];
      if (level !== 'system') failures.push(`$${op.name} (${op.definition}): not a system-level operation`);
      else await invoke(`$${op.name}`, `$${op.name}`, op.definition);
    }
    for (const cap of rest.resource) {
      for (const op of cap.operation ?? []) {
        const level = OPERATION_LEVELS[canonicalOf(op.definition)];
        const what = `${cap.type}/$${op.name}`;
        if (level === undefined || level === 'system') {
          failures.push(`${what} (${op.definition}): the walk does not know how to invoke it`);
          continue;
        }
        if (level.includes('type')) await invoke(what, `${cap.type}/$${op.name}`, op.definition);
        if (level.includes('instance'))
          await invoke(`${cap.type}/${ID}/$${op.name}`, `${cap.type}/${ID}/$${op.name}`, op.definition);
      }
    }
    expect(failures).toEqual([]);
  });
});
