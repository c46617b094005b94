import { afterEach, describe, expect, it } from 'vitest';
import type { FhirResource, Storage } from '../../src/storage/types.js';
import { storageTerminologySource } from '../../src/terminology/storage-source.js';
import { forEachStore } from '../helpers/each-store.js';
import { fixture, SHAPES } from './fixture-source.js';

/** A fixture as a new resource of the store (its id and meta are the store's to assign). */
function fresh(name: string): FhirResource {
  const { id, meta, ...resource } = fixture(name);
  void id;
  void meta;
  return resource;
}

function suite(store: string, open: () => Storage | Promise<Storage>): void {
  describe(`storageTerminologySource (${store})`, () => {
    let storage: Storage | undefined;
    afterEach(async () => {
      await storage?.close();
      storage = undefined;
    });

    async function project(...names: string[]): Promise<Storage> {
      storage = await open();
      await storage.createProject({ id: 'p1', name: 'One', strictMode: false });
      await storage.createProject({ id: 'p2', name: 'Two', strictMode: false });
      await storage.writeResources(
        'p1',
        names.map((name) => ({ op: 'create', resource: fresh(name) })),
      );
      return storage;
    }

    it('finds a code system by url: the newest version, or the one asked', async () => {
      const s = await project(
        'codesystem-shapes-1.json',
        'codesystem-shapes-2.json',
        'codesystem-fruit.json',
      );
      const source = storageTerminologySource(s, 'p1');
      expect((await source.find('CodeSystem', SHAPES))?.version).toBe('2.0.0');
      expect((await source.find('CodeSystem', SHAPES, '1.0.0'))?.version).toBe('1.0.0');
      expect(await source.find('CodeSystem', SHAPES, '9.9')).toBeUndefined();
      expect(await source.find('ValueSet', SHAPES)).toBeUndefined();
      expect((await source.find('CodeSystem', 'http://example.org/fhir/CodeSystem/fruit'))?.url).toBe(
        'http://example.org/fhir/CodeSystem/fruit',
      );
    });

    it('takes the latest update among resources of the same url and version', async () => {
      const s = await project('codesystem-shapes-1.json');
      const again = { ...fresh('codesystem-shapes-1.json'), name: 'ShapesAgain' };
      await s.writeResources('p1', [{ op: 'create', resource: again }]);
      const source = storageTerminologySource(s, 'p1');
      expect((await source.find('CodeSystem', SHAPES))?.name).toBe('ShapesAgain');
      expect((await source.find('CodeSystem', SHAPES, '1.0.0'))?.name).toBe('ShapesAgain');
    });

    it("sees its own project's resources only", async () => {
      const s = await project('codesystem-shapes-1.json');
      const other = storageTerminologySource(s, 'p2');
      expect(other.key).toBe('p2');
      expect(await other.find('CodeSystem', SHAPES)).toBeUndefined();
    });

    it('checks the right to search before every read, and keeps what it read', async () => {
      const s = await project('codesystem-shapes-1.json');
      const checked: string[] = [];
      const source = storageTerminologySource(s, 'p1', (type) => checked.push(type));
      const first = await source.find('CodeSystem', SHAPES);
      await s.writeResources('p1', [{ op: 'create', resource: fresh('codesystem-shapes-2.json') }]);
      expect(await source.find('CodeSystem', SHAPES)).toBe(first);
      expect(checked).toEqual(['CodeSystem', 'CodeSystem']);
      const refused = storageTerminologySource(s, 'p1', (type) => {
        throw new Error(`no ${type}`);
      });
      expect(() => refused.find('ValueSet', 'x')).toThrow('no ValueSet');
    });
  });
}

forEachStore('storageTerminologySource', suite);
