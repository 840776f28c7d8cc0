/**
 * `fencelock doctor` for MySQL/MariaDB: the server's version, its `sql_mode`, its clock's time zone, and the
 * replication settings that decide whether a failover or a replica can see a lease differently; of a
 * table, how many names it keeps, whether this user may retire them, and an elections table's value column
 * (the engine adds the table's presence and its DDL).
 */
import type { DoctorFinding } from '../../core/backend.js'
import { NOW_US, SESSION_SQL_MODE } from './statements.js'

type Query = (sql: string) => Promise<Record<string, unknown>[]>

export async function mysqlDoctor(query: Query): Promise<DoctorFinding[]> {
  const findings: DoctorFinding[] = []
  const [server] = await query(
    'SELECT VERSION() AS version, @@time_zone AS tz, @@system_time_zone AS systz, @@log_bin AS logbin, ' +
      '@@binlog_format AS format, @@GLOBAL.sql_mode AS server_mode, @@SESSION.sql_mode AS session_mode, ' +
      '@@SESSION.autocommit AS autocommit',
  )
  const version = String(server?.version ?? '?')
  findings.push({ level: 'ok', message: `server ${version}` })
  const mode = (name: string) => JSON.stringify(String(server?.[name] ?? ''))
  findings.push({
    level: 'ok',
    message:
      `sql_mode: the server's default is ${mode('server_mode')}, this pool's session has ${mode('session_mode')}; ` +
      "the lock statements hold under any mode, and fencelock's own connections run with " +
      `"${SESSION_SQL_MODE}" in UTC`,
  })
  if (Number(server?.autocommit) === 0) {
    findings.push({
      level: 'error',
      message:
        "this pool's sessions run with autocommit off: fencelock's reads on it (inspect, doorbell waits) open " +
        'transactions that keep seeing an old snapshot and stay open on your connections, and with ' +
        "doorbell=false its grants would never commit; make the pool's connections autocommit (SET autocommit = 1)",
    })
  }
  const tz = String(server?.tz ?? '')
  const zone = tz === 'SYSTEM' ? String(server?.systz ?? '') : tz
  if (/^(UTC|GMT|Etc\/UTC|[+-]\d\d:\d\d)$/.test(zone)) {
    findings.push({ level: 'ok', message: `time zone ${zone}: SYSDATE(6) is unambiguous` })
  } else {
    findings.push({
      level: 'warn',
      message:
        `time zone ${zone || tz}: if it has daylight saving time, SYSDATE(6) (the leases' clock) repeats an hour ` +
        'once a year and a lease can end early then; run the server in UTC (default-time-zone=+00:00)',
    })
  }
  const binlog = Number(server?.logbin) === 1
  const format = String(server?.format ?? '')
  if (!binlog) {
    findings.push({ level: 'info', message: 'binary log off: no replica sees the lease rows' })
  } else if (format === 'ROW') {
    findings.push({ level: 'ok', message: 'binlog_format ROW: replicas get the lease rows as written' })
  } else {
    findings.push({
      level: format === 'STATEMENT' ? 'warn' : 'info',
      message:
        `binlog_format ${format}: a replica replaying the statements evaluates SYSDATE() on its own clock, so ` +
        'its lease rows can differ from those on the primary; set binlog_format=ROW',
    })
  }
  findings.push({
    level: 'info',
    message:
      'a failover to an asynchronous replica can lose the latest grants (the replica may not have them yet): a ' +
      'second holder can then be granted while the first still holds; fences stay unique only if the new ' +
      'primary had every grant (semi-synchronous replication, or Galera/group replication)',
  })
  return findings
}

/**
 * How many names `table` (quoted; an elections table's when `election`) keeps, and how many of them are
 * held now: the others (released or expired) wait to be retired (statements.ts, `RETIRE_BEFORE`).
 */
export async function countFinding(query: Query, table: string, election = false): Promise<DoctorFinding> {
  const [row] = await query(
    `SELECT COUNT(*) AS n, COALESCE(SUM(released = 0 AND expires_at > ${NOW_US}), 0) AS held FROM ${table}`,
  )
  const [kept, held] = [String(row?.n ?? '?'), String(row?.held ?? '?')]
  return {
    level: 'info',
    message:
      `${election ? `the elections table ${table} keeps ${kept} election name(s), ${held} with a leader now` : `the table keeps ${kept} lock name(s), ${held} held now`}; a released ` +
      'or expired row is retired by a later grant once it ended over a minute ago (and over twice ' +
      'innodb_lock_wait_timeout)',
  }
}

/**
 * An elections table's shape: its `value` column (the leader's), which a table made from the lock table's
 * DDL lacks, so that every campaign would fail. `hasValue`: whether information_schema shows the column.
 */
export function valueColumnFinding(table: string, hasValue: boolean, ddl: string): DoctorFinding {
  if (hasValue) return { level: 'ok', message: `the elections table ${table} has its value column` }
  return {
    level: 'error',
    message:
      `the elections table ${table} has no value column (was it made from the lock table's DDL?): every ` +
      `campaign fails. Drop it and let the first campaign make it, or make it with:\n${ddl}`,
  }
}

/**
 * Whether this user may DELETE from `table` (quoted): the clean-up that retires ended rows needs it, and
 * without it the table keeps every name ever locked. `EXPLAIN DELETE` is privilege-checked like the
 * statement itself but deletes nothing, so doctor keeps its promise of no side effects (roles and
 * column grants included, which reading the grant tables would miss).
 */
export async function deleteFinding(query: Query, table: string): Promise<DoctorFinding> {
  try {
    await query(`EXPLAIN DELETE FROM ${table} WHERE 1 = 0`)
    return { level: 'ok', message: `this user may DELETE from ${table}: ended rows are retired` }
  } catch (error) {
    // ER_TABLEACCESS_DENIED_ERROR (the adapter wraps the driver's error as the cause): the only answer
    // that means "no"; anything else is reported as it is.
    const { errno, message } = ((error as { cause?: unknown }).cause ?? error) as {
      errno?: number
      message?: string
    }
    if (errno !== 1142) throw error
    const [who] = await query('SELECT CURRENT_USER() AS user')
    return {
      level: 'warn',
      message:
        `the user ${String(who?.user ?? '?')} may not DELETE from ${table} (${message ?? 'denied'}): releases ` +
        'work, but ended rows are never retired and the table keeps every lock name ever used. Run ' +
        `GRANT DELETE ON ${table} TO ${String(who?.user ?? '<user>').replace(/^([^@]*)@(.*)$/, "'$1'@'$2'")}`,
    }
  }
}
