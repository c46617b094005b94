import { compartmentSearch } from '../../src/storage/search-request.js';
import { describe, expect, it } from 'vitest';
import { PlatformError } from '../../src/errors.js';
import { scopedStorage, userDataAccess } from '../../src/fhir/scoped-storage.js';
import {
  isRefused,
  SCOPED_MEMBER_RULES,
  scopedMemberRule,
  type ScopedMemberRule,
} from '../../src/fhir/scoped-storage-rules.js';
import type { Principal } from '../../src/http/principal.js';
import { NotFoundError } from '../../src/storage/errors.js';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { afterTest } from '../helpers/cleanup.js';
import { forEachStore } from '../helpers/each-store.js';
import { allReads } from '../helpers/search-reads.js';
import { parseSearch } from '../../src/fhir/search/search-query.js';

const patientUser: Principal = {
  projectId: 'p',
  kind: 'user',
  id: 'u',
  scopes: ['user/*.cruds'],
  admin: false,
  superAdmin: false,
  fhirUser: 'Patient/a',
};

const obs = (id: string, patient: string): FhirResource & { id: string } => ({
  resourceType: 'Observation',
  id,
  status: 'final',
  subject: { reference: `Patient/${patient}` },
});

/** Every member name of `store`: its own properties and those of its prototypes, up to Object's. */
function memberNames(store: object): string[] {
  const names = new Set<string>();
  for (let at: object | null = store; at !== null && at !== Object.prototype; at = Object.getPrototypeOf(at))
    for (const key of Object.getOwnPropertyNames(at)) names.add(key);
  return [...names].sort();
}

/** Expects reading `name` of `view` to throw the view's refusal. */
function expectRefused(view: object, name: string): void {
  let thrown: unknown;
  try {
    Reflect.get(view, name);
  } catch (error) {
    thrown = error;
  }
  expect(thrown, name).toBeInstanceOf(PlatformError);
  expect(thrown, name).toMatchObject({ code: 'ERR_INTERNAL' });
}

forEachStore('scopedStorage', (store, open) =>
  describe(`scopedStorage (${store} store)`, () => {
    async function setup(extend: (storage: Storage) => Storage = (s) => s) {
      const storage = await open();
      afterTest(() => storage.close());
      await storage.createProject({ id: 'p', name: 'p', strictMode: false });
      await storage.writeResources('p', [
        { op: 'update', resource: { resourceType: 'Patient', id: 'a' } },
        { op: 'update', resource: { resourceType: 'Patient', id: 'b' } },
        { op: 'update', resource: obs('oa', 'a') },
        { op: 'update', resource: obs('ob', 'b') },
      ]);
      const access = userDataAccess(patientUser, storage, 'p')!;
      return { storage, view: scopedStorage(extend(storage), access) };
    }

    it('searches, reads and writes within the user compartment only', async () => {
      const { storage, view } = await setup();
      const page = await view.searchResources('p', 'Observation', {});
      expect(page.resources.map((r) => r.id)).toEqual(['oa']);
      expect(page.total).toBe(1);
      expect(
        (await view.searchResources('p', 'Observation', { search: compartmentSearch('Observation', ['b']) }))
          .total,
      ).toBe(0);
      await expect(view.readResource('p', 'Observation', 'ob')).rejects.toBeInstanceOf(NotFoundError);
      await expect(view.updateResource('p', obs('ob', 'a'))).rejects.toBeInstanceOf(NotFoundError);
      await expect(view.createResource('p', obs('x', 'b'))).rejects.toMatchObject({ status: 403 });
      await expect(view.updateResource('p', obs('oa', 'b'))).rejects.toMatchObject({ status: 403 });
      await expect(view.deleteResource('p', 'Observation', 'ob')).rejects.toBeInstanceOf(NotFoundError);
      await expect(
        view.writeResources('p', [{ op: 'delete', resourceType: 'Observation', id: 'ob' }]),
      ).rejects.toBeInstanceOf(NotFoundError);
      expect((await storage.readResource('p', 'Observation', 'ob')).meta.versionId).toBe('1');
      // The project's settings pass through; the store's reachability too.
      expect((await view.readProject('p')).id).toBe('p');
      await expect(view.ping()).resolves.toBeUndefined();
    });

    it('keeps chains and _has within the user reach, in the store itself (no where)', async () => {
      const { storage } = await setup();
      await storage.updateResource('p', { resourceType: 'Patient', id: 'b', name: [{ family: 'Bob' }] });
      // A Practitioner user: every Observation (`user/`), but only the launch patient's Patient.
      const practitioner = (scopes: string[]): Principal => ({
        ...patientUser,
        fhirUser: 'Practitioner/x',
        scopes,
        patientId: 'a',
      });
      const searchIds = async (principal: Principal, type: string, query: string) => {
        const view = scopedStorage(storage, userDataAccess(principal, storage, 'p')!);
        const { query: asked } = await parseSearch(type, new URLSearchParams(query), {}, allReads());
        expect(asked.where).toBeUndefined();
        const page = await view.searchResources('p', type, { ...asked, sort: '_id' });
        return page.resources.map((r) => r.id);
      };
      const patientsLimited = practitioner(['user/Observation.rs', 'patient/Patient.rs']);
      // `ob` is within reach, its subject `b` is not: the chain must not match through `b`.
      expect(await searchIds(patientsLimited, 'Observation', 'subject:Patient.name=bob')).toEqual([]);
      expect(await searchIds(patientsLimited, 'Observation', 'subject:Patient._id=a')).toEqual(['oa']);
      expect(await searchIds(patientsLimited, 'Observation', '')).toEqual(['oa', 'ob']);
      // Every Patient, only the launch patient's Observations: `_has` must not reveal `b`.
      const observationsLimited = practitioner(['patient/Observation.rs', 'user/Patient.rs']);
      expect(
        await searchIds(observationsLimited, 'Patient', '_has:Observation:subject:status=final'),
      ).toEqual(['a']);
      expect(await searchIds(observationsLimited, 'Patient', '')).toEqual(['a', 'b']);
      // Without limits the same searches see both.
      const unlimited = practitioner(['user/Observation.rs', 'user/Patient.rs']);
      expect(await searchIds(unlimited, 'Observation', 'subject:Patient.name=bob')).toEqual(['ob']);
      expect(await searchIds(unlimited, 'Patient', '_has:Observation:subject:status=final')).toEqual([
        'a',
        'b',
      ]);
    });

    it('lists the compartment types of its own patients only, where the store can list them', async () => {
      const { storage, view } = await setup();
      if (!storage.compartmentTypes) {
        expect('compartmentTypes' in view).toBe(false);
        return;
      }
      expect((await view.compartmentTypes!('p', 'a')).sort()).toEqual(['Observation', 'Patient']);
      expect((await storage.compartmentTypes('p', 'b')).sort()).toEqual(['Observation', 'Patient']);
      expect(await view.compartmentTypes!('p', 'b')).toEqual([]);
    });

    it('keeps its limits inside a transaction, and is never wrapped twice', async () => {
      const { storage, view } = await setup();
      expect(scopedStorage(view, userDataAccess(patientUser, storage, 'p')!)).toBe(view);
      const seen = await view.transaction(async (tx) => {
        await expect(tx.readResource('p', 'Observation', 'ob')).rejects.toBeInstanceOf(NotFoundError);
        // A transaction has no history: neither has its view.
        expect((tx as Partial<Storage>).readHistory).toBeUndefined();
        return (await tx.searchResources('p', 'Observation', {})).resources.map((r) => r.id);
      });
      expect(seen).toEqual(['oa']);
    });

    it('keeps history and version reads within the user compartment', async () => {
      const { storage, view } = await setup();
      await expect(view.readResourceVersion('p', 'Observation', 'ob', '1')).rejects.toBeInstanceOf(
        NotFoundError,
      );
      expect((await view.readResourceVersion('p', 'Observation', 'oa', '1')).id).toBe('oa');
      await storage.deleteResource('p', 'Observation', 'oa');

      const project = await view.readHistory('p', { count: 100 });
      // Versions of b's resources and deletions (no content to place) are left out, so is the total.
      expect(project.entries.map((e) => `${e.resourceType}/${e.id}`).sort()).toEqual([
        'Observation/oa',
        'Patient/a',
      ]);
      expect(project.total).toBeUndefined();
      const hidden = await view.readHistory('p', { type: 'Observation', id: 'ob', count: 100 });
      expect(hidden.entries).toEqual([]);
      // What the store itself answers is unchanged.
      const whole = await storage.readHistory('p', { count: 100 });
      expect(whole.entries.length).toBe(5);
    });

    it('classifies every member of the store: checked, passed through, or refused', async () => {
      const { storage, view } = await setup();
      const names = memberNames(storage);
      // Every member of the contract this store has is among them.
      expect(names).toEqual(
        expect.arrayContaining(Object.keys(SCOPED_MEMBER_RULES).filter((n) => n in storage)),
      );
      for (const name of names) {
        const rule = scopedMemberRule(name);
        if (isRefused(rule)) {
          expectRefused(view, name);
        } else if (rule === 'checked') {
          const member: unknown = Reflect.get(view, name);
          expect(typeof member, name).toBe('function');
          expect(member, name).not.toBe(Reflect.get(storage, name));
        } else {
          expect(() => Reflect.get(view, name), name).not.toThrow();
        }
      }
      expect(names.filter((name) => !isRefused(scopedMemberRule(name)))).toEqual(
        expect.arrayContaining(['readResource', 'searchResources', 'readProject', 'ping']),
      );
    });

    it('refuses a member the Storage contract does not list, and every refused one', async () => {
      // The compiler keeps the rules complete (`npx tsc`): a `Storage` with one more member needs one more.
      type Grown = Storage & { exportEverything(): Promise<void> };
      // @ts-expect-error -- `exportEverything` has no rule
      const grown: Record<keyof Grown, ScopedMemberRule> = SCOPED_MEMBER_RULES;
      expect(grown).toBe(SCOPED_MEMBER_RULES);
      // A store with one more method, as a new `Storage` method would be before it is classified.
      let called = false;
      const { view } = await setup((storage) =>
        Object.assign(storage, {
          exportEverything: () => {
            called = true;
            return Promise.resolve();
          },
        }),
      );
      expectRefused(view, 'exportEverything');
      expect(called).toBe(false);
      for (const name of ['listUsers', 'readClient', 'useOnce', 'exportReader', 'exportSnapshot', 'close'])
        expectRefused(view, name);
      expect('listUsers' in view).toBe(false);
      expect('readResource' in view).toBe(true);
      // The view hands nothing of the store out, and cannot be changed.
      expect(Object.keys(view)).toEqual([]);
      expect(() => Object.assign(view, { readResource: () => undefined })).toThrow(PlatformError);
    });
  }),
);
