import { describe, expect, it } from 'vitest';
import { FhirError } from '../../src/http/http-error.js';
import {
  DEFAULT_ADMIN_NAME,
  initProject,
  isEmailAddress,
  ownerDefaultsFromUser,
  parseInitParameters,
} from '../../src/project/init-project.js';
import { memoryStorage } from '../../src/stores.js';
import type { UserRecord } from '../../src/storage/types.js';

const p = (...parameter: unknown[]) => ({ resourceType: 'Parameters', parameter });

function expressionOf(fn: () => unknown): string[] | undefined {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(FhirError);
    expect((error as FhirError).status).toBe(400);
    return (error as FhirError).expression;
  }
  throw new Error('expected a failure');
}

describe('parseInitParameters', () => {
  it('reads the name and owner parameters, trimmed', () => {
    expect(
      parseInitParameters(
        p(
          { name: 'ownerEmail', valueString: 'ada@example.org' },
          { name: 'name', valueString: ' Alpha ' },
          { name: 'ownerGivenName', valueString: 'Ada' },
          { name: 'ownerFamilyName', valueString: 'Lovelace' },
        ),
      ),
    ).toEqual({
      name: 'Alpha',
      ownerEmail: 'ada@example.org',
      ownerGivenName: 'Ada',
      ownerFamilyName: 'Lovelace',
    });
    expect(parseInitParameters(p({ name: 'name', valueString: 'A' }))).toEqual({ name: 'A' });
  });

  it('rejects a malformed ownerEmail at its value', () => {
    for (const bad of [
      'ada',
      'ada@',
      '@example.org',
      'ada@@example.org',
      'a da@example.org',
      'ada@example',
    ]) {
      expect(
        expressionOf(() =>
          parseInitParameters(
            p({ name: 'name', valueString: 'A' }, { name: 'ownerEmail', valueString: bad }),
          ),
        ),
      ).toEqual(['Parameters.parameter[1].valueString']);
    }
  });

  it('rejects over-long names and a non-string owner name', () => {
    expect(
      expressionOf(() => parseInitParameters(p({ name: 'name', valueString: 'x'.repeat(300) }))),
    ).toEqual(['Parameters.parameter[0].valueString']);
    expect(
      expressionOf(() =>
        parseInitParameters(
          p({ name: 'name', valueString: 'A' }, { name: 'ownerGivenName', valueBoolean: true }),
        ),
      ),
    ).toEqual(['Parameters.parameter[1].valueBoolean']);
  });
});

describe('isEmailAddress', () => {
  it('accepts common addresses', () => {
    expect(isEmailAddress('first.last+tag@sub.example.co.uk')).toBe(true);
    expect(isEmailAddress(`${'a'.repeat(250)}@example.org`)).toBe(false);
  });
});

describe('ownerDefaultsFromUser', () => {
  const user: UserRecord = {
    id: 'u1',
    projectId: 'p1',
    userName: 'ada',
    userType: 'Practitioner',
    profileId: 'pr1',
    active: true,
    data: {
      name: { givenName: 'Ada', familyName: 'Lovelace' },
      emails: [{ value: 'other@example.org' }, { value: 'ada@example.org', primary: true }],
    },
    createdAt: '2026-01-01T00:00:00Z',
    updatedAt: '2026-01-01T00:00:00Z',
    version: 1,
  };

  it('takes the userName, SCIM name and primary e-mail', () => {
    expect(ownerDefaultsFromUser(user)).toEqual({
      userName: 'ada',
      email: 'ada@example.org',
      givenName: 'Ada',
      familyName: 'Lovelace',
    });
  });

  it('copes with missing or odd data', () => {
    expect(ownerDefaultsFromUser({ ...user, data: { emails: 'x', name: 3 } })).toEqual({ userName: 'ada' });
    expect(ownerDefaultsFromUser({ ...user, data: { emails: [{ value: 'not an email' }] } })).toEqual({
      userName: 'ada',
    });
  });
});

describe('initProject', () => {
  it('names an admin given no name "Project Administrator", on the user and its profile', async () => {
    const storage = memoryStorage();
    const { user, profile } = await initProject(storage, { name: 'Alpha' });
    expect(DEFAULT_ADMIN_NAME).toEqual({ givenName: 'Project', familyName: 'Administrator' });
    expect(user.data).toEqual({
      name: { formatted: 'Project Administrator', givenName: 'Project', familyName: 'Administrator' },
      displayName: 'Project Administrator',
    });
    expect(profile.name).toEqual([
      { use: 'official', text: 'Project Administrator', family: 'Administrator', given: ['Project'] },
    ]);
    // A name given in part is kept as given; the e-mail is the user's as before.
    const named = await initProject(storage, {
      name: 'Beta',
      ownerGivenName: 'Ada',
      ownerEmail: 'ada@example.org',
    });
    expect(named.user.data).toEqual({
      name: { formatted: 'Ada', givenName: 'Ada' },
      displayName: 'Ada',
      emails: [{ value: 'ada@example.org', type: 'work', primary: true }],
    });
    await storage.close();
  });
});
