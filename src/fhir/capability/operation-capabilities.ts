import { R4_RESOURCE_TYPES } from '../../common/resource-types.js';
import type { CapabilityContribution } from './capability-statement.js';

/** The canonical URLs of the R4 OperationDefinitions of the operations below. */
export const OPERATION_DEFINITIONS = {
  validate: 'http://hl7.org/fhir/OperationDefinition/Resource-validate',
  expand: 'http://hl7.org/fhir/OperationDefinition/ValueSet-expand',
  valueSetValidateCode: 'http://hl7.org/fhir/OperationDefinition/ValueSet-validate-code',
  lookup: 'http://hl7.org/fhir/OperationDefinition/CodeSystem-lookup',
  codeSystemValidateCode: 'http://hl7.org/fhir/OperationDefinition/CodeSystem-validate-code',
  subsumes: 'http://hl7.org/fhir/OperationDefinition/CodeSystem-subsumes',
} as const;

/**
 * The CapabilityStatement contribution of `$validate`: on every resource type but `AuditEvent`
 * (append-only: no write of it is ever valid here, so `$validate` of one answers 405), at the type
 * level (`[type]/$validate`) and the instance level (`[type]/[id]/$validate`), as its definition
 * says.
 * @see https://hl7.org/fhir/R4/resource-operation-validate.html
 */
export const VALIDATE_CAPABILITY: CapabilityContribution = {
  operations: [
    {
      name: 'validate',
      definition: OPERATION_DEFINITIONS.validate,
      resourceTypes: R4_RESOURCE_TYPES.filter((type) => type !== 'AuditEvent'),
    },
  ],
};

/**
 * The CapabilityStatement contribution of the terminology operations: `$expand` and `$validate-code`
 * on ValueSet; `$lookup`, `$validate-code` and `$subsumes` on CodeSystem.
 * @see https://hl7.org/fhir/R4/terminology-service.html
 */
export const TERMINOLOGY_CAPABILITY: CapabilityContribution = {
  operations: [
    { name: 'expand', definition: OPERATION_DEFINITIONS.expand, resourceTypes: ['ValueSet'] },
    {
      name: 'validate-code',
      definition: OPERATION_DEFINITIONS.valueSetValidateCode,
      resourceTypes: ['ValueSet'],
    },
    { name: 'lookup', definition: OPERATION_DEFINITIONS.lookup, resourceTypes: ['CodeSystem'] },
    {
      name: 'validate-code',
      definition: OPERATION_DEFINITIONS.codeSystemValidateCode,
      resourceTypes: ['CodeSystem'],
    },
    { name: 'subsumes', definition: OPERATION_DEFINITIONS.subsumes, resourceTypes: ['CodeSystem'] },
  ],
};
