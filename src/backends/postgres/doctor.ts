/**
 * `fencelock doctor` for PostgreSQL: reachability, the server's version, the session settings the
 * statements meet (they pin what they need: adapter.ts) and the replication it can see; of a table
 * (`pgTableDoctor`), its rows, privileges, fence sequence and (an elections table's) value column. A
 * lease lives in one row of the primary: a failover to an asynchronous standby can lose the
 * latest grants (and fences), which is said plainly where standbys stream from this server. The engine
 * adds the table and notification findings.
 */

import { raceSignal } from '../../core/abort.js'
import type { DoctorFinding } from '../../core/backend.js'
import type { PgSql } from './client.js'
import { unavailable } from './faults.js'
import { fenceSequence, type PgTable, qualified, sequenceDdl, tableDdl } from './layout.js'

interface Store {
  readonly id: string
  readonly table: PgTable
  readonly createTable: boolean
  /** An elections table (its rows have a `value`). */
  readonly election?: boolean | undefined
}

interface Settings {
  version: string
  num: string
  sync_commit: string
  standby_names: string
  in_recovery: boolean
  standbys: number
  isolation: string
  read_only: string
  settings: string
}

interface Fences {
  /** The sequence's last value (null before its first use or when it is missing) and cache size. */
  last_value: string | null
  cache_size: string | null
  has_sequence: boolean
  /** Whether the table has a `value` column (an elections table must). */
  has_value: boolean
  rows: string | null
  /** Rows held now (unreleased, unexpired on the server's clock). */
  held: string | null
  max_fence: string | null
  /** Whether this role may delete rows (a release deletes its row). */
  can_delete: boolean
  role: string
}

/** Session settings shown as they are: none of them changes what the statements do. */
const SHOWN = [
  'TimeZone',
  'DateStyle',
  'IntervalStyle',
  'search_path',
  'standard_conforming_strings',
  'statement_timeout',
  'lock_timeout',
]

/** The server's findings (the table's are `pgTableDoctor`'s). */
export async function pgDoctor(sql: PgSql, store: Store, signal: AbortSignal): Promise<DoctorFinding[]> {
  let s: Settings
  try {
    const rows = (await raceSignal(
      sql.unsafe(`SELECT version() AS version, current_setting('server_version_num') AS num,
        current_setting('synchronous_commit') AS sync_commit,
        current_setting('synchronous_standby_names') AS standby_names,
        pg_is_in_recovery() AS in_recovery,
        (SELECT count(*) FROM pg_catalog.pg_stat_replication)::int AS standbys,
        current_setting('default_transaction_isolation') AS isolation,
        current_setting('default_transaction_read_only') AS read_only,
        concat_ws(', ', ${SHOWN.map((name) => `'${name} = ' || current_setting('${name}')`).join(', ')}) AS settings`),
      signal,
    )) as unknown as Settings[]
    s = rows[0]!
  } catch (error) {
    return [{ level: 'error', message: unavailable(error, 'query the server', undefined, store.id).message }]
  }
  const findings: DoctorFinding[] = [{ level: 'ok', message: `reachable: ${s.version}` }]
  if (Number(s.num) < 110000) {
    findings.push({
      level: 'error',
      message: 'PostgreSQL 11 or later is needed (INSERT … ON CONFLICT, pg_notify in a CTE)',
    })
  }
  if (s.in_recovery) {
    findings.push({
      level: 'error',
      message: 'this server is a read-only standby (pg_is_in_recovery): locks must be taken on the primary',
    })
  }
  findings.push({
    level: 'ok',
    message:
      `session defaults: default_transaction_isolation = ${s.isolation}, default_transaction_read_only = ` +
      `${s.read_only}, ${s.settings}. Each statement pins READ COMMITTED, READ WRITE for its own ` +
      'transaction and depends on none of the others',
  })
  findings.push(...replication(s))
  return findings
}

/** What a failover or a crash can lose, from the standbys streaming from here and the commit settings. */
function replication(s: Settings): DoctorFinding[] {
  const findings: DoctorFinding[] = []
  const names = s.standby_names.trim()
  const local = s.sync_commit === 'off' || s.sync_commit === 'local'
  if (s.standbys === 0) {
    findings.push(
      names === '' || local
        ? {
            level: 'ok',
            message:
              'no standby streams from this server (pg_stat_replication is empty): a failover cannot lose ' +
              'grants; if you add asynchronous standbys, it can',
          }
        : {
            level: 'warn',
            message: `synchronous_standby_names = '${names}' but no standby streams from this server: every commit (every grant, renewal and release) waits until one connects`,
          },
    )
  } else if (names === '') {
    findings.push({
      level: 'warn',
      message:
        `${s.standbys} standby(s) stream from this server asynchronously (synchronous_standby_names is ` +
        'empty), so a failover to one can lose the latest grants, releases and fences; two holders may ' +
        'then coexist and a fence may be granted twice. Use synchronous replication or fail over only ' +
        'after the lease ttl',
    })
  } else {
    findings.push({
      level: local ? 'warn' : 'ok',
      message: `${s.standbys} standby(s); synchronous_standby_names = '${names}', synchronous_commit = ${s.sync_commit}${
        local ? ': a commit does not wait for the standby, so a failover can lose a lease' : ''
      }`,
    })
  }
  if (s.sync_commit === 'off') {
    findings.push({
      level: 'warn',
      message:
        'synchronous_commit = off: a crash of the server can lose the latest committed grants (and fences) ' +
        'from its own disk',
    })
  }
  return findings
}

/**
 * The table's findings, once the engine found it: its rows, the DELETE its releases need, an elections
 * table's `value` column, and the fence sequence: present, uncached, and ahead of every fence in the
 * table. Behind them (set back, or restored from an older backup), a deleted row's next grant could
 * repeat a fence.
 */
export async function pgTableDoctor(sql: PgSql, store: Store, signal: AbortSignal): Promise<DoctorFinding[]> {
  const seq = fenceSequence(store.table)
  const name = qualified(seq)
  let f: Fences
  try {
    const table = (await raceSignal(
      sql.unsafe('SELECT pg_catalog.to_regclass($1::text) IS NOT NULL AS found', [qualified(store.table)]),
      signal,
    )) as unknown as { found: boolean }[]
    // No table yet: the engine says so, with the DDL.
    if (table[0]?.found !== true) return []
    const rows = (await raceSignal(
      sql.unsafe(
        `SELECT (SELECT last_value::text FROM pg_catalog.pg_sequences WHERE schemaname = $1 AND sequencename = $2) AS last_value,
          (SELECT cache_size::text FROM pg_catalog.pg_sequences WHERE schemaname = $1 AND sequencename = $2) AS cache_size,
          EXISTS (SELECT 1 FROM pg_catalog.pg_sequences WHERE schemaname = $1 AND sequencename = $2) AS has_sequence,
          (SELECT count(*)::text FROM ${qualified(store.table)}) AS rows,
          (SELECT count(*)::text FROM ${qualified(store.table)} WHERE NOT released AND expires_at > pg_catalog.clock_timestamp()) AS held,
          (SELECT max(fence)::text FROM ${qualified(store.table)}) AS max_fence,
          EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = pg_catalog.to_regclass($3::text)
            AND attname = 'value' AND NOT attisdropped) AS has_value,
          pg_catalog.has_table_privilege($3::text, 'DELETE') AS can_delete, current_user AS role`,
        [seq.schema, seq.table, qualified(store.table)],
      ),
      signal,
    )) as unknown as Fences[]
    f = rows[0]!
  } catch (error) {
    return [
      {
        level: 'error',
        message: unavailable(error, 'read the fence sequence', undefined, store.id).message,
      },
    ]
  }
  const kept = store.election
    ? `the elections table ${qualified(store.table)} keeps ${f.rows} election name(s), ${f.held} with a leader now`
    : `the table keeps ${f.rows} lock name(s), ${f.held} held now`
  const findings: DoctorFinding[] = [
    {
      level: 'ok',
      message:
        `${kept}, the largest fence ${f.max_fence ?? 'none yet'}; ` +
        'a release deletes its row, and a row whose lease ended over a minute ago is retired by a later grant',
    },
  ]
  if (store.election) findings.push(valueColumn(store, f.has_value))
  if (!f.can_delete) {
    findings.push({
      level: 'error',
      message: `the role ${f.role} may not DELETE from ${qualified(store.table)}: every release fails (a release deletes its row) and its lock lingers until its ttl. Run GRANT DELETE ON ${qualified(store.table)} TO "${f.role}"`,
    })
  }
  if (!f.has_sequence) {
    findings.push(
      store.createTable
        ? {
            level: 'info',
            message: `the fence sequence ${name} does not exist yet (a table of an earlier version, or it was dropped): the first lock makes it`,
          }
        : {
            level: 'error',
            message: `the fence sequence ${name} does not exist (a table of an earlier version, or it was dropped) and createTable is off: no lock can be taken until it is made (e.g. in a migration) with:\n${sequenceDdl(store.table)};`,
          },
    )
  } else if (f.cache_size !== '1') {
    findings.push({
      level: 'error',
      message: `the fence sequence ${name} caches ${f.cache_size} values per session: fences can be handed out of order. Run ALTER SEQUENCE ${name} CACHE 1`,
    })
  } else if (f.max_fence !== null && (f.last_value === null || BigInt(f.last_value) < BigInt(f.max_fence))) {
    findings.push({
      level: 'warn',
      message: `the fence sequence ${name} (${f.last_value ?? 'unused'}) is behind the table's largest fence ${f.max_fence} (set back, or restored from an older backup): a key whose row is deleted could be granted a fence again. Run SELECT setval('${name}', ${f.max_fence})`,
    })
  } else {
    findings.push({
      level: 'ok',
      message: `fences come from the sequence ${name} (last value ${f.last_value ?? 'none yet'}), which outlives the rows: deleting or truncating them, or dropping the table, never sets a fence back`,
    })
  }
  return findings
}

/** An elections table's shape: the leader's `value`, which a table made from the lock table's DDL lacks. */
function valueColumn(store: Store, hasValue: boolean): DoctorFinding {
  const name = qualified(store.table)
  if (hasValue) return { level: 'ok', message: `the elections table ${name} has its value column` }
  return {
    level: 'error',
    message:
      `the elections table ${name} has no value column (was it made from the lock table's DDL?): every ` +
      `campaign fails. Drop it and let the first campaign make it, or make it with:\n${tableDdl(store.table, true)}`,
  }
}
