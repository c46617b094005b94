/**
 * SCIM schema definitions (RFC 7643 §2.2, §4.1, §4.2, §4.3, §7, §8.7.1) for the User and Group
 * resources: the data served by `/Schemas`, and the source of the case-sensitivity, type and
 * mutability rules the filter evaluator, the PATCH engine and the attribute projection follow.
 */

export type ScimAttributeType =
  'string' | 'boolean' | 'decimal' | 'integer' | 'dateTime' | 'reference' | 'binary' | 'complex';

/** One attribute definition, in the shape RFC 7643 §7 serves under `/Schemas`. */
export interface ScimAttributeDefinition {
  name: string;
  type: ScimAttributeType;
  multiValued: boolean;
  description: string;
  required: boolean;
  caseExact: boolean;
  mutability: 'readOnly' | 'readWrite' | 'immutable' | 'writeOnly';
  returned: 'always' | 'never' | 'default' | 'request';
  uniqueness: 'none' | 'server' | 'global';
  canonicalValues?: string[];
  referenceTypes?: string[];
  subAttributes?: ScimAttributeDefinition[];
}

/** A schema resource (RFC 7643 §7). */
export interface ScimSchemaDefinition {
  id: string;
  name: string;
  description: string;
  attributes: ScimAttributeDefinition[];
}

/** Everything needed to interpret one resource type's JSON. */
export interface ScimResourceSchemas {
  /** The base schema; its attributes live at the top level of the resource. */
  core: ScimSchemaDefinition;
  /** Extension schemas; their attributes live in an object keyed by the schema URN. */
  extensions: ScimSchemaDefinition[];
  /** `id`, `externalId` and `meta` (RFC 7643 §3.1), top level, in no schema's attribute list. */
  common: ScimAttributeDefinition[];
}

export const CORE_USER_SCHEMA_ID = 'urn:ietf:params:scim:schemas:core:2.0:User';
export const ENTERPRISE_USER_SCHEMA_ID = 'urn:ietf:params:scim:schemas:extension:enterprise:2.0:User';
export const CORE_GROUP_SCHEMA_ID = 'urn:ietf:params:scim:schemas:core:2.0:Group';
export const PATCH_OP_SCHEMA_ID = 'urn:ietf:params:scim:api:messages:2.0:PatchOp';
export const LIST_RESPONSE_SCHEMA_ID = 'urn:ietf:params:scim:api:messages:2.0:ListResponse';
export const SEARCH_REQUEST_SCHEMA_ID = 'urn:ietf:params:scim:api:messages:2.0:SearchRequest';
export const ERROR_SCHEMA_ID = 'urn:ietf:params:scim:api:messages:2.0:Error';

/** Profile resource types a user may be linked to (the values of `userType`). */
export const USER_TYPES = ['Patient', 'Practitioner', 'RelatedPerson'] as const;

type Options = Partial<Omit<ScimAttributeDefinition, 'name' | 'type' | 'description'>>;

function attr(
  name: string,
  type: ScimAttributeType,
  description: string,
  options: Options = {},
): ScimAttributeDefinition {
  return {
    name,
    type,
    multiValued: false,
    description,
    required: false,
    caseExact: false,
    mutability: 'readWrite',
    returned: 'default',
    uniqueness: 'none',
    ...options,
  };
}

/** The sub-attributes every multi-valued "value/display/type/primary" attribute has (RFC 7643 §2.4). */
function multiValuedParts(
  valueType: ScimAttributeType,
  types: string[],
  valueOptions: Options = {},
): ScimAttributeDefinition[] {
  return [
    attr('value', valueType, 'The value.', valueOptions),
    attr('display', 'string', 'A human-readable name, primarily used for display purposes.'),
    attr(
      'type',
      'string',
      'A label indicating the function of the value.',
      types.length ? { canonicalValues: types } : {},
    ),
    attr('primary', 'boolean', 'Whether this is the preferred value; at most one value may be primary.'),
  ];
}

function multi(
  name: string,
  description: string,
  subAttributes: ScimAttributeDefinition[],
  options: Options = {},
): ScimAttributeDefinition {
  return attr(name, 'complex', description, { multiValued: true, subAttributes, ...options });
}

const userAttributes: ScimAttributeDefinition[] = [
  attr(
    'userName',
    'string',
    'Unique identifier for the user, typically used to authenticate with the identity provider. In responses, the id of the linked FHIR profile resource unless the server echoes the provided name.',
    {
      required: true,
      uniqueness: 'server',
    },
  ),
  attr('name', 'complex', "The components of the user's name.", {
    subAttributes: [
      attr('formatted', 'string', 'The full name, formatted for display.'),
      attr('familyName', 'string', 'The family name.'),
      attr('givenName', 'string', 'The given name.'),
      attr('middleName', 'string', 'The middle name(s).'),
      attr('honorificPrefix', 'string', 'The honorific prefix(es).'),
      attr('honorificSuffix', 'string', 'The honorific suffix(es).'),
    ],
  }),
  attr('displayName', 'string', 'The name of the user, suitable for display.'),
  attr('nickName', 'string', 'The casual way to address the user.'),
  attr('profileUrl', 'reference', "A URI of the user's online profile.", { referenceTypes: ['external'] }),
  attr('title', 'string', "The user's title."),
  attr(
    'userType',
    'string',
    'The type of the linked FHIR profile resource. Required on create; cannot change afterwards.',
    {
      required: true,
      mutability: 'immutable',
      canonicalValues: [...USER_TYPES],
    },
  ),
  attr('preferredLanguage', 'string', "The user's preferred written or spoken language."),
  attr('locale', 'string', "The user's default location for localization."),
  attr('timezone', 'string', "The user's time zone (IANA name)."),
  attr('active', 'boolean', "The user's administrative status; an inactive user cannot act in the project."),
  attr('password', 'string', 'Not stored by this server; accepted and ignored.', {
    mutability: 'writeOnly',
    returned: 'never',
  }),
  multi('emails', 'Email addresses for the user.', multiValuedParts('string', ['work', 'home', 'other'])),
  multi(
    'phoneNumbers',
    'Phone numbers for the user.',
    multiValuedParts('string', ['work', 'home', 'mobile', 'fax', 'pager', 'other']),
  ),
  multi('ims', 'Instant messaging addresses for the user.', multiValuedParts('string', [])),
  multi(
    'photos',
    'URLs of photos of the user.',
    multiValuedParts('reference', ['photo', 'thumbnail'], { referenceTypes: ['external'] }),
  ),
  multi('addresses', 'Physical mailing addresses for the user.', [
    attr('formatted', 'string', 'The full mailing address, formatted for display.'),
    attr('streetAddress', 'string', 'The full street address component.'),
    attr('locality', 'string', 'The city or locality component.'),
    attr('region', 'string', 'The state or region component.'),
    attr('postalCode', 'string', 'The zip code or postal code component.'),
    attr('country', 'string', 'The country name component (ISO 3166-1 alpha-2).'),
    attr('type', 'string', 'A label indicating the function of the address.', {
      canonicalValues: ['work', 'home', 'other'],
    }),
    attr('primary', 'boolean', 'Whether this is the preferred address.'),
  ]),
  multi(
    'groups',
    "Groups the user belongs to. Not returned by this server: read the groups' members instead.",
    [
      attr('value', 'string', 'The id of the group.', { mutability: 'readOnly' }),
      attr('$ref', 'reference', 'The URI of the group.', {
        mutability: 'readOnly',
        referenceTypes: ['Group'],
      }),
      attr('display', 'string', 'The name of the group.', { mutability: 'readOnly' }),
      attr('type', 'string', 'direct or indirect.', {
        mutability: 'readOnly',
        canonicalValues: ['direct', 'indirect'],
      }),
    ],
    { mutability: 'readOnly' },
  ),
  multi('entitlements', 'Entitlements of the user.', multiValuedParts('string', [])),
  multi('roles', 'Roles of the user.', multiValuedParts('string', [])),
  multi('x509Certificates', 'Certificates of the user.', multiValuedParts('binary', [])),
];

const enterpriseAttributes: ScimAttributeDefinition[] = [
  attr(
    'employeeNumber',
    'string',
    'Numeric or alphanumeric identifier assigned to the person by the organization.',
  ),
  attr('costCenter', 'string', 'Identifies the name of a cost center.'),
  attr('organization', 'string', 'Identifies the name of an organization.'),
  attr('division', 'string', 'Identifies the name of a division.'),
  attr('department', 'string', 'Identifies the name of a department.'),
  attr('manager', 'complex', "The user's manager.", {
    subAttributes: [
      attr('value', 'string', 'The id of the manager.'),
      attr('$ref', 'reference', 'The URI of the manager.', { referenceTypes: ['User'] }),
      attr('displayName', 'string', 'The display name of the manager.', { mutability: 'readOnly' }),
    ],
  }),
];

const commonAttributes: ScimAttributeDefinition[] = [
  attr('id', 'string', 'Unique identifier of the resource, assigned by the service provider.', {
    caseExact: true,
    mutability: 'readOnly',
    returned: 'always',
    uniqueness: 'server',
  }),
  attr('externalId', 'string', 'Identifier of the resource in the provisioning client.', { caseExact: true }),
  attr('meta', 'complex', 'Resource metadata.', {
    mutability: 'readOnly',
    subAttributes: [
      attr('resourceType', 'string', 'The resource type.', { caseExact: true, mutability: 'readOnly' }),
      attr('created', 'dateTime', 'When the resource was added.', { mutability: 'readOnly' }),
      attr('lastModified', 'dateTime', 'When the resource was last changed.', { mutability: 'readOnly' }),
      attr('location', 'reference', 'The URI of the resource.', {
        caseExact: true,
        mutability: 'readOnly',
        referenceTypes: ['uri'],
      }),
      attr('version', 'string', 'The version (weak ETag) of the resource.', {
        caseExact: true,
        mutability: 'readOnly',
      }),
    ],
  }),
];

/** The User resource's schemas: core User, the enterprise extension, and the common attributes. */
export const USER_RESOURCE_SCHEMAS: ScimResourceSchemas = {
  core: {
    id: CORE_USER_SCHEMA_ID,
    name: 'User',
    description: 'User Account',
    attributes: userAttributes,
  },
  extensions: [
    {
      id: ENTERPRISE_USER_SCHEMA_ID,
      name: 'EnterpriseUser',
      description: 'Enterprise User',
      attributes: enterpriseAttributes,
    },
  ],
  common: commonAttributes,
};

const groupAttributes: ScimAttributeDefinition[] = [
  // RFC 7643 §4.2 makes it REQUIRED (the §8.7.1 listing says otherwise); unique per project.
  attr('displayName', 'string', 'A human-readable name for the group, unique in the project.', {
    required: true,
    uniqueness: 'server',
  }),
  multi('members', 'The users of the group.', [
    attr('value', 'string', 'The id of a user of the project.', {
      caseExact: true,
      mutability: 'immutable',
    }),
    attr('$ref', 'reference', 'The URI of the user.', { mutability: 'immutable', referenceTypes: ['User'] }),
    attr('display', 'string', "The member's name, for display."),
    attr('type', 'string', 'The type of the member: only users are members here.', {
      mutability: 'immutable',
      canonicalValues: ['User'],
    }),
  ]),
];

/** The Group resource's schemas (RFC 7643 §4.2): core Group and the common attributes. */
export const GROUP_RESOURCE_SCHEMAS: ScimResourceSchemas = {
  core: {
    id: CORE_GROUP_SCHEMA_ID,
    name: 'Group',
    description: 'Group',
    attributes: groupAttributes,
  },
  extensions: [],
  common: commonAttributes,
};

/** An attribute found in a resource's schemas, with where its value lives in the JSON. */
export interface ResolvedAttribute {
  /** The URN of the schema that defines it (the core URN for common attributes). */
  schemaId: string;
  /** Set when the attribute lives under the extension's URN key. */
  extension?: string;
  definition: ScimAttributeDefinition;
  /** Set for `attribute.subAttribute` paths. */
  subAttribute?: ScimAttributeDefinition;
}

function sameName(a: string, b: string): boolean {
  return a.toLowerCase() === b.toLowerCase();
}

/** A sub-attribute of a complex attribute, by case-insensitive name. */
export function findSubAttribute(
  definition: ScimAttributeDefinition,
  name: string,
): ScimAttributeDefinition | undefined {
  return definition.subAttributes?.find((sub) => sameName(sub.name, name));
}

/** The schema with that URN (case-insensitive), core or extension. */
export function findSchema(schemas: ScimResourceSchemas, urn: string): ScimSchemaDefinition | undefined {
  if (sameName(schemas.core.id, urn)) return schemas.core;
  return schemas.extensions.find((ext) => sameName(ext.id, urn));
}

/**
 * Finds an attribute by optional schema URN, name and sub-attribute name, all case-insensitive
 * (RFC 7643 §2.1). An unqualified name is looked up in the common attributes, then the core schema,
 * then the extensions. Undefined when the schemas do not define it.
 */
export function resolveAttribute(
  schemas: ScimResourceSchemas,
  path: { schema?: string; attribute: string; subAttribute?: string },
): ResolvedAttribute | undefined {
  let found: ResolvedAttribute | undefined;
  if (path.schema !== undefined) {
    const schema = findSchema(schemas, path.schema);
    if (!schema) return undefined;
    const extension = schema === schemas.core ? undefined : schema.id;
    const pool = extension ? schema.attributes : [...schemas.common, ...schema.attributes];
    const definition = pool.find((a) => sameName(a.name, path.attribute));
    if (definition) found = { schemaId: schema.id, definition, ...(extension ? { extension } : {}) };
  } else {
    const common = [...schemas.common, ...schemas.core.attributes].find((a) =>
      sameName(a.name, path.attribute),
    );
    if (common) found = { schemaId: schemas.core.id, definition: common };
    else {
      for (const ext of schemas.extensions) {
        const definition = ext.attributes.find((a) => sameName(a.name, path.attribute));
        if (definition) {
          found = { schemaId: ext.id, extension: ext.id, definition };
          break;
        }
      }
    }
  }
  if (!found || path.subAttribute === undefined) return found;
  const sub = findSubAttribute(found.definition, path.subAttribute);
  return sub ? { ...found, subAttribute: sub } : undefined;
}

/** The `/Schemas` representation of a schema (RFC 7643 §7), with `meta` for the given location. */
export function schemaResource(schema: ScimSchemaDefinition, location: string): Record<string, unknown> {
  return {
    schemas: ['urn:ietf:params:scim:schemas:core:2.0:Schema'],
    id: schema.id,
    name: schema.name,
    description: schema.description,
    attributes: schema.attributes,
    meta: { resourceType: 'Schema', location },
  };
}
