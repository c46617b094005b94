import { ConflictError, NotFoundError } from '../errors.js';
import type {
  ClientChanges,
  ClientRecord,
  FhirResource,
  MembershipRecord,
  NewClient,
  NewMembership,
  NewUser,
  PatientCompartment,
  ProjectChanges,
  ProjectRecord,
  ResourcePage,
  ResourceQuery,
  ResourceWrite,
  StorageOperations,
  StoredResource,
  UserChanges,
  UserQuery,
  UserListOptions,
  UserPage,
  UserRecord,
  WriteOptions,
  WriteResult,
} from '../types.js';
import type { Executor, Query } from './executor.js';
import { applyResourceWrites, checkStorableId, lockProjectResources } from './resource-writes.js';
import { searchResources } from './resource-search.js';
import type { SearchIndex } from './search-index-sync.js';
import {
  checkIfVersion,
  checkUserName,
  finishUserUpdate,
  mergeUserChanges,
  newClientRecord,
  newMembershipRecord,
  newProjectRecord,
  newRecordId,
  newUserRecord,
  updatedClientRecord,
  updatedProjectRecord,
  type NewProject,
} from '../record-rules.js';
import { resolveUserList } from '../user-list.js';
import { postgresUserPage, userListColumns } from './user-page.js';
import { deleteThroughBatch, updateThroughBatch } from '../single-writes.js';

interface RecordRow<T> {
  record: T;
}

function records<T>(rows: RecordRow<T>[]): T[] {
  return rows.map((r) => r.record);
}

function json(value: unknown): string {
  return JSON.stringify(value);
}

/**
 * The `StorageOperations` of the PostgreSQL store, written once against an `Executor` (the pool,
 * or one open transaction). Records are kept as `json` (their text as written) next to the columns their lookups and
 * uniqueness rules need.
 */
export class PostgresOperations implements StorageOperations {
  constructor(
    protected readonly exec: Executor,
    /** The quoted schema name. */
    protected readonly s: string,
    protected readonly compartment: PatientCompartment,
    /** The search index the store keeps (its indexer, set once the store is open), if any. */
    protected readonly index: SearchIndex,
    /**
     * Inside a transaction, reads of a project, user or client lock the row until commit, so a
     * read-modify-write (a SCIM PATCH) waits for a concurrent one instead of failing its
     * `ifVersion`, and reading a project's resources holds back its resource writers: what a
     * transaction read stays true until it commits, as in the other stores.
     */
    private readonly lockReads = false,
    /** Told the number of resource writes each `writeResources` made (a transaction's count). */
    private readonly onWrites?: (count: number) => void,
  ) {}

  /** Projects whose resource writers this transaction holds back (see `lockProjectResources`). */
  private readonly lockedProjects = new Set<string>();

  private async lockResources(query: Query, projectId: string): Promise<void> {
    if (!this.lockReads || this.lockedProjects.has(projectId)) return;
    await lockProjectResources(query, this.s, projectId);
    this.lockedProjects.add(projectId);
  }

  private get forUpdate(): string {
    return this.lockReads ? ' FOR UPDATE' : '';
  }

  // Projects

  createProject(project: NewProject): Promise<ProjectRecord> {
    return this.exec.run('write', async (query) => {
      checkStorableId(project.id, 'project');
      const now = new Date().toISOString();
      const record = newProjectRecord(project, now);
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.projects (id, created_at, record) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING`,
        [record.id, now, json(record)],
      );
      if (rowCount === 0) throw new ConflictError(`Project ${record.id} exists`, { attribute: 'id' });
      return record;
    });
  }

  readProject(id: string): Promise<ProjectRecord> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<RecordRow<ProjectRecord>>(
        `SELECT record FROM ${this.s}.projects WHERE id = $1${this.forUpdate}`,
        [id],
      );
      if (!rows[0]) throw new NotFoundError(`Project ${id} not found`);
      return rows[0].record;
    });
  }

  updateProject(id: string, changes: ProjectChanges): Promise<ProjectRecord> {
    return this.exec.run('atomic', async (query) => {
      const { rows } = await query<RecordRow<ProjectRecord>>(
        `SELECT record FROM ${this.s}.projects WHERE id = $1 FOR UPDATE`,
        [id],
      );
      const current = rows[0]?.record;
      if (!current) throw new NotFoundError(`Project ${id} not found`);
      const record = updatedProjectRecord(current, id, changes, new Date().toISOString());
      await query(`UPDATE ${this.s}.projects SET record = $2 WHERE id = $1`, [id, json(record)]);
      return record;
    });
  }

  // Users

  createUser(projectId: string, user: NewUser): Promise<UserRecord> {
    return this.exec.run('write', async (query) => {
      const id = newRecordId(user.id);
      checkStorableId(id, 'user');
      checkUserName(user.userName);
      const now = new Date().toISOString();
      const record = newUserRecord(projectId, id, user, now);
      // DO NOTHING rather than an error: inside a transaction, a failed statement would abort it.
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.users
           (project_id, id, user_name_key, external_id, profile_id, created_at, version, record, updated_at, emails)
         VALUES ($1, $2, $3, $4, $5, $6, 1, $7, $8, $9)
         ON CONFLICT DO NOTHING`,
        [
          projectId,
          id,
          record.userName.toLowerCase(),
          record.externalId ?? null,
          record.profileId,
          now,
          json(record),
          now,
          userListColumns(record).emails,
        ],
        true,
      );
      if (rowCount === 0) throw await this.userConflict(query, projectId, record);
      return record;
    });
  }

  /** Which uniqueness rule a user insert broke. */
  private async userConflict(query: Query, projectId: string, user: UserRecord): Promise<ConflictError> {
    const { rows } = await query<{ attribute: string }>(
      `SELECT CASE WHEN id = $2 THEN 'id' WHEN user_name_key = $3 THEN 'userName' ELSE 'externalId' END AS attribute
         FROM ${this.s}.users
        WHERE project_id = $1 AND (id = $2 OR user_name_key = $3 OR external_id = $4)
        ORDER BY CASE WHEN id = $2 THEN 1 WHEN user_name_key = $3 THEN 2 ELSE 3 END LIMIT 1`,
      [projectId, user.id, user.userName.toLowerCase(), user.externalId ?? null],
    );
    const attribute = rows[0]?.attribute;
    return new ConflictError(`A user with the same ${attribute ?? 'key'} exists`, {
      ...(attribute !== undefined ? { attribute } : {}),
    });
  }

  readUser(projectId: string, id: string): Promise<UserRecord> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<RecordRow<UserRecord>>(
        `SELECT record FROM ${this.s}.users WHERE project_id = $1 AND id = $2${this.forUpdate}`,
        [projectId, id],
        true,
      );
      if (!rows[0]) throw new NotFoundError(`User ${id} not found`);
      return rows[0].record;
    });
  }

  updateUser(
    projectId: string,
    id: string,
    changes: UserChanges,
    options?: { ifVersion?: number },
  ): Promise<UserRecord> {
    return this.exec.run('atomic', async (query) => {
      const { rows } = await query<RecordRow<UserRecord>>(
        `SELECT record FROM ${this.s}.users WHERE project_id = $1 AND id = $2 FOR UPDATE`,
        [projectId, id],
      );
      const current = rows[0]?.record;
      if (!current) throw new NotFoundError(`User ${id} not found`);
      checkIfVersion('User', id, current.version, options?.ifVersion);
      const record = finishUserUpdate(
        mergeUserChanges(current, changes),
        projectId,
        id,
        current.version,
        new Date().toISOString(),
      );
      await query(
        `UPDATE ${this.s}.users
            SET user_name_key = $3, external_id = $4, profile_id = $5, version = $6, record = $7,
                updated_at = $8, emails = $9
          WHERE project_id = $1 AND id = $2`,
        [
          projectId,
          id,
          record.userName.toLowerCase(),
          record.externalId ?? null,
          record.profileId,
          record.version,
          json(record),
          record.updatedAt,
          userListColumns(record).emails,
        ],
      );
      return record;
    });
  }

  deleteUser(projectId: string, id: string): Promise<void> {
    return this.exec.run('write', async (query) => {
      const { rowCount } = await query(`DELETE FROM ${this.s}.users WHERE project_id = $1 AND id = $2`, [
        projectId,
        id,
      ]);
      if (rowCount === 0) throw new NotFoundError(`User ${id} not found`);
    });
  }

  findUsers(projectId: string, q: UserQuery): Promise<UserRecord[]> {
    const values: unknown[] = [projectId];
    const clauses = ['project_id = $1'];
    if (q.userName !== undefined) {
      values.push(q.userName.toLowerCase());
      clauses.push(`user_name_key = $${values.length}`);
    }
    if (q.externalId !== undefined) {
      values.push(q.externalId);
      clauses.push(`external_id = $${values.length}`);
    }
    if (q.profileId !== undefined) {
      values.push(q.profileId);
      clauses.push(`profile_id = $${values.length}`);
    }
    return this.exec.run('read', async (query) => {
      const { rows } = await query<RecordRow<UserRecord>>(
        `SELECT record FROM ${this.s}.users WHERE ${clauses.join(' AND ')} ORDER BY created_at, id`,
        values,
        true,
      );
      return records(rows);
    });
  }

  listUsers(projectId: string): Promise<UserRecord[]>;
  listUsers(projectId: string, options: UserListOptions): Promise<UserPage>;
  async listUsers(projectId: string, options?: UserListOptions): Promise<UserRecord[] | UserPage> {
    if (options === undefined) return this.findUsers(projectId, {});
    const list = resolveUserList(options);
    return this.exec.run('read', (query) => postgresUserPage(query, this.s, projectId, list));
  }

  // Memberships

  createMembership(projectId: string, membership: NewMembership): Promise<MembershipRecord> {
    return this.exec.run('write', async (query) => {
      const id = newRecordId(membership.id);
      checkStorableId(id, 'membership');
      const record = newMembershipRecord(projectId, id, membership, new Date().toISOString());
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.memberships (project_id, id, user_id, client_id, created_at, record)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
        [projectId, id, record.userId ?? null, record.clientId ?? null, record.createdAt, json(record)],
      );
      if (rowCount === 0) throw new ConflictError(`Membership ${id} exists`, { attribute: 'id' });
      return record;
    });
  }

  listMemberships(
    projectId: string,
    q?: { userId?: string; clientId?: string },
  ): Promise<MembershipRecord[]> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<RecordRow<MembershipRecord>>(
        `SELECT record FROM ${this.s}.memberships
          WHERE project_id = $1 AND ($2::text IS NULL OR user_id = $2) AND ($3::text IS NULL OR client_id = $3)
          ORDER BY created_at, id`,
        [projectId, q?.userId ?? null, q?.clientId ?? null],
      );
      return records(rows);
    });
  }

  deleteMembership(projectId: string, id: string): Promise<void> {
    return this.exec.run('write', async (query) => {
      const { rowCount } = await query(
        `DELETE FROM ${this.s}.memberships WHERE project_id = $1 AND id = $2`,
        [projectId, id],
      );
      if (rowCount === 0) throw new NotFoundError(`Membership ${id} not found`);
    });
  }

  // Clients

  createClient(client: NewClient): Promise<ClientRecord> {
    return this.exec.run('write', async (query) => {
      checkStorableId(client.id, 'client');
      const now = new Date().toISOString();
      const record = newClientRecord(client, now);
      const { rowCount } = await query(
        `INSERT INTO ${this.s}.clients (id, project_id, created_at, record) VALUES ($1, $2, $3, $4)
         ON CONFLICT DO NOTHING`,
        [record.id, record.projectId, now, json(record)],
      );
      if (rowCount === 0) throw new ConflictError(`Client ${record.id} exists`, { attribute: 'id' });
      return record;
    });
  }

  readClient(clientId: string): Promise<ClientRecord> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<RecordRow<ClientRecord>>(
        `SELECT record FROM ${this.s}.clients WHERE id = $1${this.forUpdate}`,
        [clientId],
        true,
      );
      if (!rows[0]) throw new NotFoundError(`Client ${clientId} not found`);
      return rows[0].record;
    });
  }

  listClients(projectId: string): Promise<ClientRecord[]> {
    return this.exec.run('read', async (query) => {
      const { rows } = await query<RecordRow<ClientRecord>>(
        `SELECT record FROM ${this.s}.clients WHERE project_id = $1 ORDER BY created_at, id`,
        [projectId],
      );
      return records(rows);
    });
  }

  updateClient(clientId: string, changes: ClientChanges): Promise<ClientRecord> {
    return this.exec.run('atomic', async (query) => {
      const { rows } = await query<RecordRow<ClientRecord>>(
        `SELECT record FROM ${this.s}.clients WHERE id = $1 FOR UPDATE`,
        [clientId],
      );
      const current = rows[0]?.record;
      if (!current) throw new NotFoundError(`Client ${clientId} not found`);
      const record = updatedClientRecord(current, changes, new Date().toISOString());
      await query(`UPDATE ${this.s}.clients SET record = $2 WHERE id = $1`, [clientId, json(record)]);
      return record;
    });
  }

  // Resources

  async createResource(projectId: string, resource: FhirResource): Promise<StoredResource> {
    const [result] = await this.writeResources(projectId, [{ op: 'create', resource }]);
    return result!.resource!;
  }

  readResource(projectId: string, resourceType: string, id: string): Promise<StoredResource> {
    return this.exec.run('read', async (query) => {
      await this.lockResources(query, projectId);
      const { rows } = await query<{ deleted: boolean; body: string | null }>(
        `SELECT deleted, body FROM ${this.s}.resources
          WHERE project_id = $1 AND resource_type = $2 AND id = $3 AND superseded_seq IS NULL`,
        [projectId, resourceType, id],
        true,
      );
      const row = rows[0];
      if (!row) throw new NotFoundError(`${resourceType}/${id} not found`);
      if (row.deleted || row.body === null) {
        throw new NotFoundError(`${resourceType}/${id} was deleted`, { deleted: true });
      }
      return JSON.parse(row.body) as StoredResource;
    });
  }

  updateResource(
    projectId: string,
    resource: FhirResource & { id: string },
    options?: WriteOptions,
  ): Promise<{ resource: StoredResource; created: boolean }> {
    return updateThroughBatch((writes) => this.writeResources(projectId, writes), resource, options);
  }

  deleteResource(projectId: string, resourceType: string, id: string, options?: WriteOptions): Promise<void> {
    return deleteThroughBatch((writes) => this.writeResources(projectId, writes), resourceType, id, options);
  }

  async writeResources(projectId: string, writes: ResourceWrite[]): Promise<WriteResult[]> {
    const results = await this.exec.run('atomic', (query) =>
      applyResourceWrites(query, this.s, this.compartment, projectId, writes, this.index.indexer),
    );
    this.onWrites?.(writes.length);
    return results;
  }

  /**
   * The types of the patient's compartment rows: versions of every kind (superseded ones too),
   * hence possibly a type more than the live resources have, as the contract allows. One range of
   * the `resource_compartments` key.
   */
  compartmentTypes(projectId: string, patientId: string): Promise<string[]> {
    return this.exec.run('read', async (query) => {
      await this.lockResources(query, projectId);
      const { rows } = await query<{ resource_type: string }>(
        `SELECT DISTINCT resource_type FROM ${this.s}.resource_compartments WHERE project_id = $1 AND patient_id = $2`,
        [projectId, patientId],
        true,
      );
      return rows.map((r) => r.resource_type);
    });
  }

  searchResources(projectId: string, resourceType: string, query: ResourceQuery = {}): Promise<ResourcePage> {
    // In the search lane (the store's executor) and by the query's deadline.
    return this.exec.run(
      'read',
      async (q) => {
        await this.lockResources(q, projectId);
        return searchResources(q, this.s, projectId, resourceType, query, this.index.indexer);
      },
      { projectId, deadline: query.deadline },
    );
  }
}
