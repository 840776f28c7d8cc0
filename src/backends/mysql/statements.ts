/**
 * The statements of the MySQL/MariaDB dialect, each ONE statement on the lease row, on the server's clock.
 *
 * Time: `SYSDATE(6)`, the moment the statement evaluates it (`NOW()` is frozen at the statement's start
 * and can be set by `SET timestamp`), turned into microseconds since the epoch by `UNIX_TIMESTAMP`, so
 * sessions with different `time_zone` settings agree. A time zone with daylight saving time makes
 * `SYSDATE` ambiguous for one hour a year: fencelock's own sessions run in UTC (`SESSION_SETTINGS`); the
 * reads on a pool of yours follow its sessions' zone (run the server in UTC: `doctor` says so).
 * Statement-based replication evaluates `SYSDATE` again on the replica: use row-based binlogs.
 */

/**
 * The session settings of every connection fencelock owns (its lease connections, and every connection of
 * a pool it made from a URL), whatever the server's defaults: strict (a value that does not fit fails
 * instead of being cut), no engine substitution (a lock table on MyISAM would have no row locks), backslash
 * escapes on (mysql2 escapes with them), UTC (`UNIX_TIMESTAMP(SYSDATE(6))` is then exact all year), and
 * autocommit (with it off, a server's default, a grant would stay uncommitted and its row locked).
 * The statements below hold under any `sql_mode` too (the acquire does not depend on the order in which
 * its assignments apply; none uses `"`, `||` or a space before a function's parenthesis): pinning is the
 * second line of defence, and the only one for the user's own pool connections (reads, doorbell waits).
 */
export const SESSION_SQL_MODE = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'
export const SESSION_SETTINGS = `SET SESSION sql_mode = '${SESSION_SQL_MODE}', time_zone = '+00:00', autocommit = 1`

/** The server's clock, now, in microseconds since the epoch (evaluated where it appears). */
export const NOW_US = 'CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)'

/**
 * The least fence a grant issued at server time `now` (µs since 1970) may carry: the clock itself, plus one
 * second. A key's fences thus outlive its row: a row deleted (DELETE, TRUNCATE, the table recreated) starts
 * again from the clock, above every fence the deleted row issued, since each of those was at most the clock
 * at its grant plus one second, plus one per grant issued faster than one per microsecond (a grant is a
 * committed statement: tens of microseconds at least), provided the insert read its clock after that
 * grant: an insert reads it before it may wait for the row's lock, so one that waited while the row was
 * granted and deleted would not be above it (fencelock retires a row only long after its last grant, see
 * `RETIRE_BEFORE`; an operator's DELETE has no such margin). What still restarts them: the server's clock
 * set back by more than the time between the deleted row's last grant and the new one. BIGINT holds such
 * fences until the year 294247.
 */
const FENCE_EPOCH = (now: string): string => `${now} + 1000000`

/** Takes `bell` on this connection unless it holds it already (named locks count: never twice). 2 params. */
const TAKE_BELL = 'IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 0, COALESCE(GET_LOCK(?, 0), 0))'
/** Frees `bell` if this connection holds it. 1 param. */
const FREE_BELL = 'COALESCE(RELEASE_LOCK(?), 0)'

/**
 * Acquire. Params: key, owner, ttl ms, [bell, bell], holder, owner, [bell], holder, owner, owner, ttl ms
 * (bracketed: with the doorbell; on an elections table, also the value after the first holder, and owner,
 * value after the second: sql-election.ts; no `VALUES()`, which MySQL 8.0.20 deprecated). One INSERT …
 * SELECT … ON DUPLICATE KEY UPDATE:
 * - the clock is read ONCE (`n.now`, a one-row derived table the server materializes before the insert:
 *   its LIMIT keeps an optimizer from merging it into the statement, which would read the clock anew at
 *   every reference), so
 *   the decision cannot tip one column one way and the next another. It may be read before the statement
 *   waits for the row's lock: a stale `now` only takes over later and sets a lease that ends earlier on the
 *   server, never one shorter than the client's validity (counted from before the statement was sent).
 * - no row: inserted; its fence comes from the server's clock (see `FENCE_EPOCH`), so it is above every fence
 *   of a row that was deleted (affected rows 1).
 * - a row: every assignment decides for itself from the row as it stood (take: released or expired; renew:
 *   ours; else held), with the same `now`. The assignments are ordered so that the decision also holds when
 *   later ones see the new values of earlier ones (MySQL's default) as when they all see the old row
 *   (`sql_mode` SIMULTANEOUS_ASSIGNMENT, part of MariaDB's ORACLE mode): `fence`, `holder` and `owner` do
 *   not change what decides; after `owner` is ours, "take" reads as "ours" for `expires_at`; `released` is
 *   0 in every case (a row held by another is not released). Taken: fence GREATEST(fence + 1, the epoch),
 *   renewed: kept; both affected rows 2. Held by another: every column keeps its value, affected rows 0
 *   (with CLIENT_FOUND_ROWS off; on, it would be 1, like an insert: the dialect refuses such a pool).
 * - `LAST_INSERT_ID(expr)` hands one integer back in the reply's OK packet, in the same statement (MySQL has
 *   no RETURNING): the fence when inserted, taken or renewed, the holder's remaining lease in ms when held
 *   by another (paces the next attempt).
 * - The doorbell (doorbell.ts) rides in the same statement, on the lease connection it runs on: the row's
 *   values are computed before the key is found taken, so they take the bell (when free and not ours
 *   already); a refusal frees it again in its own branch. A grant thus holds its bell from the instant it
 *   commits, at no extra statement; a bell some other connection holds (a paused former holder) is not
 *   waited for: the grant goes on without it, and its waiters fall back to the lease's end.
 */
export const acquireSql = (table: string, bell: boolean, election = false): string => {
  const take = 'released = 1 OR expires_at <= n.now'
  return `INSERT INTO ${table}
  (lock_key, owner, fence, expires_at, released, holder${election ? ', value' : ''})
  SELECT ?, ?, LAST_INSERT_ID(${FENCE_EPOCH('n.now')}), n.now + ? * 1000, ${bell ? `0 * ${TAKE_BELL}` : '0'}, ?${election ? ', ?' : ''}
  FROM (SELECT ${NOW_US} AS now LIMIT 1) AS n
  ON DUPLICATE KEY UPDATE
    fence = CASE
      WHEN ${take} THEN LAST_INSERT_ID(GREATEST(fence + 1, ${FENCE_EPOCH(NOW_US)}))
      WHEN owner = ? THEN LAST_INSERT_ID(fence)
      ELSE fence + 0 * LAST_INSERT_ID(GREATEST(0, expires_at - n.now) DIV 1000)${bell ? ` + 0 * ${FREE_BELL}` : ''} END,
    holder = IF(${take}, ?, holder),${
      election
        ? `
    value = IF(${take} OR owner = ?, ?, value),`
        : ''
    }
    owner = IF(${take}, ?, owner),
    expires_at = IF(${take} OR owner = ?, n.now + ? * 1000, expires_at),
    released = 0`
}

/**
 * Extend. Params: ttl ms, [bell, bell], key, owner, fence. Restarts the lease only while the row is ours
 * with our fence, not released and not ended on the server's clock: an ended lease is never revived, since
 * the key was free in between and its holder must hear that it lost it (every other store ends it too). The reply's
 * "Rows matched" says whether it was (whatever CLIENT_FOUND_ROWS says of changed rows). With the doorbell,
 * takes the bell again if this connection lost it (a reconnect): only on a row that matched.
 */
export const extendSql = (table: string, bell: boolean): string =>
  `UPDATE ${table} SET expires_at = ${NOW_US} + ? * 1000${bell ? ` + 0 * ${TAKE_BELL}` : ''}
  WHERE lock_key = ? AND owner = ? AND fence = ? AND released = 0 AND expires_at > ${NOW_US}`

/**
 * Release. Params: [bell], key, owner[, fence]. Marks the row released (free at once, even if the server's
 * clock steps back) and notes when in `expires_at`, from which `retireDueSql` counts; the fence stays, and
 * the row stays until it is retired. With the doorbell, frees the bell in the same statement: its waiters
 * wake, and their attempts queue behind this statement's row lock until it commits, so they find the row
 * free.
 */
export const releaseSql = (table: string, withFence: boolean, bell: boolean): string =>
  `UPDATE ${table} SET released = 1${bell ? ` + 0 * ${FREE_BELL}` : ''}, expires_at = ${NOW_US}
  WHERE lock_key = ? AND owner = ? AND released = 0${withFence ? ' AND fence = ?' : ''}`

/**
 * Break. Params: key, owner, fence. The release, conditioned on the lease the engine read: its owner and
 * fence, still held on the server's clock (a grant, renewal or release since matches nothing). Marked
 * released as by a release. A bell is freed only by the session holding it (the holder's
 * lease connection), so the break leaves another client's bell alone: its waiters wake at their doorbell
 * wait's bound (5 s) or when the holder's next renewal finds its lease gone and frees it.
 */
export const breakSql = (table: string): string =>
  `UPDATE ${table} SET released = 1, expires_at = ${NOW_US}
  WHERE lock_key = ? AND owner = ? AND fence = ? AND released = 0 AND expires_at > ${NOW_US}`

/**
 * List: one page of the rows held now whose key starts with the prefix, after a key, in byte order (the
 * key column is binary: no collation, no wildcards; the prefix is compared as bytes). Params: prefix,
 * prefix's length in bytes, prefix, [after]. The fence as text, as in `readSql`.
 */
export const listSql = (table: string, afterKey: boolean, limit: number): string =>
  `SELECT lock_key, owner, CAST(fence AS CHAR) AS fence, released, holder,
    expires_at - ${NOW_US} AS remaining_us
  FROM ${table}
  WHERE lock_key >= CAST(? AS BINARY) AND LEFT(lock_key, ?) = CAST(? AS BINARY)${afterKey ? ' AND lock_key > CAST(? AS BINARY)' : ''}
    AND released = 0 AND expires_at > ${NOW_US}
  ORDER BY lock_key LIMIT ${Math.trunc(limit)}`

/**
 * The end before which a row may be retired: its lease ended (or it was released) `?` ms ago, and at least
 * twice the longest a statement may wait for a row lock (`innodb_lock_wait_timeout`). Fences come from the
 * clock (`FENCE_EPOCH`), and an acquire reads the clock before it may wait for a row lock: one that read
 * it before a grant of the name and inserts after that row was deleted would draw a smaller fence. Each
 * of a retired row's fences is at most the clock at its last grant plus one second, and that grant came
 * before the row's end, so every acquire that read the clock before it has ended by now (or failed its
 * lock wait): the next grant's fence is larger, while the server's clock does not go back by more than
 * this margin. Param: ms.
 */
const RETIRE_BEFORE = `${NOW_US} - GREATEST(? * 1000, 2000000 * GREATEST(@@GLOBAL.innodb_lock_wait_timeout, @@SESSION.innodb_lock_wait_timeout))`

/**
 * Retire, first: up to `limit` keys whose row ended before `RETIRE_BEFORE` (released, or expired: a crashed
 * holder's). A plain read (no locks; a locking scan would hold every row it reads under REPEATABLE READ,
 * stalling the table's renewals), of the whole table when few rows qualify: the engine runs it rarely.
 * Param: ms.
 */
export const retireDueSql = (table: string, limit: number): string =>
  `SELECT lock_key FROM ${table} WHERE expires_at < ${RETIRE_BEFORE} LIMIT ${Math.trunc(limit)}`

/**
 * Retire, then: deletes those of `count` keys whose row still ended before `RETIRE_BEFORE` (checked again
 * on the row as it is: one granted or renewed since stays). Params: ms, then the keys.
 */
export const retireSql = (table: string, count: number): string =>
  `DELETE FROM ${table} WHERE expires_at < ${RETIRE_BEFORE} AND lock_key IN (${Array(count).fill('?').join(', ')})`

/**
 * Proclaim (an elections table's). Params: value, key, owner, fence. Replaces the leader's value only while
 * the row is ours with our fence, not released, and its lease has not ended on the server's clock; the
 * reply's "Rows matched" says whether it was (a value proclaimed twice changes no row, but matches).
 */
export const proclaimSql = (table: string): string =>
  `UPDATE ${table} SET value = ?
  WHERE lock_key = ? AND owner = ? AND fence = ? AND released = 0 AND expires_at > ${NOW_US}`

/** Frees a bell outside a lease statement (a release or an extend that found the row not ours). Param: bell. */
export const freeBellSql = `DO ${FREE_BELL}`

/** Read. Param: key. The fence as text (exact past 2^53 whatever the pool's number settings). */
export const readSql = (table: string, election = false): string =>
  `SELECT owner, CAST(fence AS CHAR) AS fence, released, holder,${election ? ' value,' : ''}
    expires_at - ${NOW_US} AS remaining_us
  FROM ${table} WHERE lock_key = ?`

/**
 * The longest a doorbell wait blocks (s): a waiter that gave up (or was never woken) holds a pool connection
 * at most this long, and a TRUNCATE or ALTER of the table waits for the waits' metadata locks no longer.
 * The waiter's own pace re-asks as often (index.ts, `DOORBELL_POLL_MAX_MS`).
 */
export const DOORBELL_WAIT_MAX_S = 5

/**
 * The doorbell wait, first: the holder's lease left (`rem`, seconds) on the server's clock. Param: key. No
 * row (or a released one): the lock is free, attempt again. A statement of its own, so that the wait
 * below, which blocks, holds no metadata lock on the table (a TRUNCATE or ALTER of it would wait for it,
 * and every lock statement behind that).
 */
export const leaseLeftSql = (table: string): string =>
  `SELECT GREATEST(0, expires_at - ${NOW_US}) / 1000000 AS rem FROM ${table} WHERE lock_key = ? AND released = 0`

/**
 * The doorbell wait, then. Params: bell, rem, bell, bell, rem, bell, long (0 or 1), rem. Its timeout is the
 * holder's lease left (at most `DOORBELL_WAIT_MAX_S`), so a paused holder that keeps its doorbell
 * connection cannot keep us past its lease:
 * - the bell is held (the holder's doorbell): block in GET_LOCK until it is freed (a release) or the lease
 *   ends, then free it at once (RELEASE_LOCK in the same statement, so the next waiter wakes too);
 * - the bell is free although the row is held (a holder rings 2 ms after its grant, has lost its bell
 *   connection, or released since `leaseLeftSql`): look again after a 20 ms grace, then block as above;
 *   still free, return -1 at once (the waiter attempts again: the lease may have been short or released),
 *   or, after a -1 (`long`), sleep two seconds on the server. A missing bell thus costs at most two
 *   statements per two seconds, plus the waiter's attempt.
 */
export const ringSql = `SELECT IF(IS_FREE_LOCK(?) = 0 OR (SLEEP(LEAST(0.02, ?)) = 0 AND IS_FREE_LOCK(?) = 0),
    GET_LOCK(?, LEAST(CEIL(?), ${DOORBELL_WAIT_MAX_S})) + COALESCE(RELEASE_LOCK(?), 0),
    IF(? = 1, SLEEP(LEAST(1.98, ?)), -1)) AS rang`

/** Whether the table has a column. Params: its database (or NULL for the connection's), its name, the column's. */
export const columnExistsSql = `SELECT COUNT(*) AS n FROM information_schema.columns
  WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND column_name = ?`

/** The table exists? Param: the table's name, and its database (or NULL for the connection's). */
export const tableExistsSql = `SELECT COUNT(*) AS n FROM information_schema.tables
  WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`
