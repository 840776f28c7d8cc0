/**
 * `fencelock doctor` for PostgreSQL: reachability, the server's version, and the replication settings it
 * can see. A lease lives in one row of the primary: a failover to an asynchronous standby can lose the
 * latest grants (and fences), which is said plainly. The engine adds the table and notification findings.
 */

import { raceSignal } from '../../core/abort.js'
import type { DoctorFinding } from '../../core/backend.js'
import { unavailable } from './faults.js'
import type { PgSql } from './sql.js'

interface Settings {
  version: string
  num: string
  sync_commit: string
  standby_names: string
  in_recovery: boolean
}

export async function pgDoctor(sql: PgSql, id: string, signal: AbortSignal): Promise<DoctorFinding[]> {
  let s: Settings
  try {
    const rows = (await raceSignal(
      sql.unsafe(`SELECT version() AS version, current_setting('server_version_num') AS num,
        current_setting('synchronous_commit') AS sync_commit,
        current_setting('synchronous_standby_names') AS standby_names,
        pg_is_in_recovery() AS in_recovery`),
      signal,
    )) as unknown as Settings[]
    s = rows[0]!
  } catch (error) {
    return [{ level: 'error', message: unavailable(error, 'query the server', undefined, id).message }]
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
  if (s.standby_names.trim() === '') {
    findings.push({
      level: 'warn',
      message:
        'synchronous_standby_names is empty: replication (if any) is asynchronous, so a failover to a ' +
        'standby can lose the latest grants, releases and fences; two holders may then coexist and a fence ' +
        'may be granted twice. Use synchronous replication or fail over only after the lease ttl',
    })
  } else {
    findings.push({
      level: s.sync_commit === 'off' || s.sync_commit === 'local' ? 'warn' : 'ok',
      message: `synchronous_standby_names = '${s.standby_names}', synchronous_commit = ${s.sync_commit}${
        s.sync_commit === 'off' || s.sync_commit === 'local'
          ? ': a commit does not wait for the standby, so a failover can lose a lease'
          : ''
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
