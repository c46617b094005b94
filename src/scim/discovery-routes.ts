import type { Request, RequestHandler, Router } from 'express';
import { ScimError } from '../http/http-error.js';
import { methodNotAllowed, sendScim } from '../http/protocol-responses.js';
import {
  resourceTypeResource,
  schemaResources,
  serviceProviderConfig,
  type ScimResourceTypeDefinition,
} from './discovery.js';
import { listResponse } from './list-response.js';

/** What the discovery routes need of the SCIM router. */
export interface DiscoveryRouteDeps {
  /** The resource types the router serves, in the order `/ResourceTypes` lists them. */
  types: readonly ScimResourceTypeDefinition[];
  /** Advertised as `filter.maxResults`. */
  maxResults: number;
  documentationUri: string | undefined;
  /** The absolute URL of a path under the router's mount point. */
  url: (req: Request, path: string) => string;
}

const SPC = /^\/ServiceProviderConfig\/?$/;
const RESOURCE_TYPES = /^\/ResourceTypes\/?$/;
const RESOURCE_TYPE = /^\/ResourceTypes\/([^/]+)\/?$/;
const SCHEMAS = /^\/Schemas\/?$/;
const SCHEMA = /^\/Schemas\/([^/]+)\/?$/;

/** A filter on a discovery endpoint is 403 (RFC 7644 §4). */
const noFilter: RequestHandler = (req, _res, next) => {
  if (req.query.filter !== undefined) next(new ScimError(403, undefined, 'Filtering is not supported here'));
  else next();
};

/**
 * Mounts the discovery endpoints (RFC 7644 §4) on the SCIM router: `GET /ServiceProviderConfig`,
 * `/ResourceTypes[/{id}]` and `/Schemas[/{id}]`. Other methods answer 405.
 */
export function mountDiscoveryRoutes(router: Router, deps: DiscoveryRouteDeps): void {
  const { types, maxResults, documentationUri, url } = deps;
  const resourceTypes = (req: Request) =>
    types.map((type) => resourceTypeResource(type, url(req, `/ResourceTypes/${type.name}`)));
  const allSchemas = (req: Request) => schemaResources(types, (id) => url(req, `/Schemas/${id}`));
  const config = { maxResults, ...(documentationUri ? { documentationUri } : {}) };

  router
    .route(SPC)
    .get(noFilter, (req, res) => {
      sendScim(res, 200, serviceProviderConfig(config, url(req, '/ServiceProviderConfig')));
    })
    .all(methodNotAllowed('GET', 'scim'));
  router
    .route(RESOURCE_TYPES)
    .get(noFilter, (req, res) => {
      const all = resourceTypes(req);
      sendScim(res, 200, listResponse(all, all.length, 1));
    })
    .all(methodNotAllowed('GET', 'scim'));
  router
    .route(RESOURCE_TYPE)
    .get(noFilter, (req, res, next) => {
      const found = resourceTypes(req).find((t) => t.id === req.params[0]);
      if (found) sendScim(res, 200, found);
      else next(new ScimError(404, undefined, 'Unknown resource type'));
    })
    .all(methodNotAllowed('GET', 'scim'));
  router
    .route(SCHEMAS)
    .get(noFilter, (req, res) => {
      const all = allSchemas(req);
      sendScim(res, 200, listResponse(all, all.length, 1));
    })
    .all(methodNotAllowed('GET', 'scim'));
  router
    .route(SCHEMA)
    .get(noFilter, (req, res, next) => {
      const id = decodeURIComponent(req.params[0]!).toLowerCase();
      const found = allSchemas(req).find((s) => typeof s.id === 'string' && s.id.toLowerCase() === id);
      if (found) sendScim(res, 200, found);
      else next(new ScimError(404, undefined, 'Unknown schema'));
    })
    .all(methodNotAllowed('GET', 'scim'));
}
