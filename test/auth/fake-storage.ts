/* eslint-disable @typescript-eslint/require-await -- an in-memory fake of an async contract */
import { NotFoundError, ConflictError } from '../../src/storage/errors.js';
import type {
  ClientChanges,
  ClientRecord,
  NewClient,
  ProjectRecord,
  SigningKeyRecord,
  Storage,
} from '../../src/storage/types.js';

/**
 * The part of the storage contract auth uses (clients, projects, signing keys, useOnce), in memory,
 * so the auth tests do not depend on a full adapter. Records are copied in and out like a real one.
 */
export interface FakeStorage extends Storage {
  /** Test hook: makes a project exist. */
  addProject(id: string): void;
  /** Test hook: removes a project. */
  removeProject(id: string): void;
  /** Calls counted per method name. */
  readonly calls: Map<string, number>;
}

export function fakeStorage(): FakeStorage {
  const clients = new Map<string, ClientRecord>();
  const projects = new Map<string, ProjectRecord>();
  const keys = new Map<string, SigningKeyRecord>();
  const once = new Map<string, number>();
  const calls = new Map<string, number>();
  const copy = <T>(value: T): T => structuredClone(value);
  const count = (name: string) => calls.set(name, (calls.get(name) ?? 0) + 1);

  const storage: Partial<FakeStorage> = {
    calls,
    addProject(id) {
      const at = new Date().toISOString();
      projects.set(id, { id, name: id, strictMode: false, createdAt: at, updatedAt: at, version: 1 });
    },
    removeProject(id) {
      projects.delete(id);
    },
    async readProject(id) {
      count('readProject');
      const project = projects.get(id);
      if (!project) throw new NotFoundError(`Project ${id} not found`);
      return copy(project);
    },
    async createClient(client: NewClient) {
      count('createClient');
      if (clients.has(client.id)) throw new ConflictError('exists', { attribute: 'id' });
      const at = new Date().toISOString();
      const record: ClientRecord = { revoked: false, ...copy(client), createdAt: at, updatedAt: at };
      clients.set(client.id, record);
      return copy(record);
    },
    async readClient(id) {
      count('readClient');
      const client = clients.get(id);
      if (!client) throw new NotFoundError(`Client ${id} not found`);
      return copy(client);
    },
    async listClients(projectId) {
      return [...clients.values()].filter((c) => c.projectId === projectId).map(copy);
    },
    async updateClient(id, changes: ClientChanges) {
      count('updateClient');
      const client = clients.get(id);
      if (!client) throw new NotFoundError(`Client ${id} not found`);
      const updated = { ...client, ...copy(changes), updatedAt: new Date().toISOString() };
      clients.set(id, updated);
      return copy(updated);
    },
    async listSigningKeys() {
      count('listSigningKeys');
      return [...keys.values()].map(copy);
    },
    async saveSigningKey(key) {
      count('saveSigningKey');
      keys.set(key.kid, copy(key));
    },
    async useOnce(key, expiresAt) {
      const now = Date.now();
      const until = once.get(key);
      if (until !== undefined && until > now) return false;
      once.set(key, expiresAt);
      return true;
    },
  };
  return storage as FakeStorage;
}
