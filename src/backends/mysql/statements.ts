/**
 * The statements of the MySQL/MariaDB dialect, each ONE statement on the lease row, on the server's clock.
 *
 * Time: `SYSDATE(6)`, the moment the statement evaluates it (`NOW()` is frozen at the statement's start
 * and can be set by `SET timestamp`), turned into microseconds since the epoch by `UNIX_TIMESTAMP`, so
 * sessions with different `time_zone` settings agree. A time zone with daylight saving time makes
 * `SYSDATE` ambiguous for one hour a year: run the server (or the sessions) in UTC (`doctor` says so).
 * Statement-based replication evaluates `SYSDATE` again on the replica: use row-based binlogs.
 */

/** The server's clock, now, in microseconds since the epoch (evaluated where it appears). */
const NOW_US = 'CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)'

/** Takes `bell` on this connection unless it holds it already (named locks count: never twice). 2 params. */
const TAKE_BELL = 'IF(IS_USED_LOCK(?) <=> CONNECTION_ID(), 0, COALESCE(GET_LOCK(?, 0), 0))'
/** Frees `bell` if this connection holds it. 1 param. */
const FREE_BELL = 'COALESCE(RELEASE_LOCK(?), 0)'

/**
 * Acquire. Params: key, owner, ttl ms, [bell, bell], holder, then owner, [bell], owner, holder, ttl ms
 * (bracketed: with the doorbell; no `VALUES()`, which MySQL 8.0.20 deprecated). One INSERT … ON DUPLICATE
 * KEY UPDATE:
 * - no row: inserted with fence 1 (affected rows 1);
 * - a row: the first assignment decides ONCE, with one reading of the clock, and writes the decision into
 *   `released` (2 = take it: released or expired; 3 = ours and held: restart its lease; else unchanged).
 *   Assignments apply left to right and later ones see the new value, so every other column follows that
 *   one decision and the clock cannot tip one column one way and the next another. The last assignment
 *   puts `released` back to 0. Taken or renewed: affected rows 2; held by another: nothing changes,
 *   affected rows 0 (with CLIENT_FOUND_ROWS off; on, it would be 1, like an insert: the dialect refuses such
 *   a pool).
 * - `LAST_INSERT_ID(expr)` hands one integer back in the reply's OK packet, in the same statement (MySQL has
 *   no RETURNING): the fence when taken or renewed, the holder's remaining lease in ms when held by another
 *   (paces the next attempt).
 * - The doorbell (doorbell.ts) rides in the same statement, on the client's lease connection: the row's
 *   values are computed before the key is found taken, so they take the bell (when free and not ours
 *   already); a refusal frees it again in its own branch. A grant thus holds its bell from the instant it
 *   commits, at no extra statement; a bell some other connection holds (a paused former holder) is not
 *   waited for: the grant goes on without it, and its waiters fall back to the lease's end.
 */
export const acquireSql = (table: string, bell: boolean): string => `INSERT INTO ${table}
  (lock_key, owner, fence, expires_at, released, holder)
  VALUES (?, ?, 1, ${NOW_US} + ? * 1000, ${bell ? `0 * ${TAKE_BELL}` : '0'}, ?)
  ON DUPLICATE KEY UPDATE
    released = CASE WHEN released = 1 OR expires_at <= ${NOW_US} THEN 2 WHEN owner = ? THEN 3 ELSE released END,
    fence = CASE released
      WHEN 2 THEN LAST_INSERT_ID(fence + 1)
      WHEN 3 THEN LAST_INSERT_ID(fence)
      ELSE fence + 0 * LAST_INSERT_ID(GREATEST(0, expires_at - ${NOW_US}) DIV 1000)${bell ? ` + 0 * ${FREE_BELL}` : ''} END,
    owner = IF(released = 2, ?, owner),
    holder = IF(released = 2, ?, holder),
    expires_at = IF(released IN (2, 3), ${NOW_US} + ? * 1000, expires_at),
    released = IF(released IN (2, 3), 0, released)`

/**
 * Extend. Params: ttl ms, [bell, bell], key, owner, fence. Restarts the lease only while the row is ours
 * with our fence and not released (expired but untaken is still ours: nobody else was granted). The reply's
 * "Rows matched" says whether it was (whatever CLIENT_FOUND_ROWS says of changed rows). With the doorbell,
 * takes the bell again if this connection lost it (a reconnect): only on a row that matched.
 */
export const extendSql = (table: string, bell: boolean): string =>
  `UPDATE ${table} SET expires_at = ${NOW_US} + ? * 1000${bell ? ` + 0 * ${TAKE_BELL}` : ''}
  WHERE lock_key = ? AND owner = ? AND fence = ? AND released = 0`

/**
 * Release. Params: [bell], key, owner[, fence]. Marks the row released and its lease ended at the epoch
 * (free at once, even if the server's clock steps back); the fence stays, the row is never deleted. With
 * the doorbell, frees the bell in the same statement: its waiters wake, and their attempts queue behind
 * this statement's row lock until it commits, so they find the row free.
 */
export const releaseSql = (table: string, withFence: boolean, bell: boolean): string =>
  `UPDATE ${table} SET released = 1${bell ? ` + 0 * ${FREE_BELL}` : ''}, expires_at = 0
  WHERE lock_key = ? AND owner = ? AND released = 0${withFence ? ' AND fence = ?' : ''}`

/** Frees a bell outside a lease statement (a release or an extend that found the row not ours). Param: bell. */
export const freeBellSql = `DO ${FREE_BELL}`

/** Read. Param: key. The fence as text (exact past 2^53 whatever the pool's number settings). */
export const readSql = (table: string): string =>
  `SELECT owner, CAST(fence AS CHAR) AS fence, released, holder,
    expires_at - ${NOW_US} AS remaining_us
  FROM ${table} WHERE lock_key = ?`

/**
 * The doorbell wait. Params: bell, bell, bell, bell, long (0 or 1), key. One statement, its timeout taken
 * from the holder's lease on the server (`rem`, seconds), so a paused holder that keeps its doorbell
 * connection cannot keep us past its lease:
 * - the bell is held (the holder's doorbell): block in GET_LOCK until it is freed (a release) or the lease
 *   ends, then free it at once (RELEASE_LOCK in the same statement, so the next waiter wakes too);
 * - the bell is free although the row is held (a holder rings 2 ms after its grant, or has lost its bell
 *   connection): look again after a 20 ms grace, then block as above; still free, return -1 at once
 *   (the waiter attempts again: the lease may have been short), or, after a -1 (`long`), sleep two
 *   seconds on the server. A missing bell thus costs at most one statement per two seconds, plus the
 *   waiter's attempt.
 * No row (or a released one): returns no row at once: the lock is free, attempt again.
 */
export const watchSql = (table: string): string =>
  `SELECT IF(IS_FREE_LOCK(?) = 0 OR (SLEEP(LEAST(0.02, r.rem)) = 0 AND IS_FREE_LOCK(?) = 0),
      GET_LOCK(?, CEIL(r.rem)) + COALESCE(RELEASE_LOCK(?), 0),
      IF(? = 1, SLEEP(LEAST(1.98, r.rem)), -1)) AS rang
  FROM (SELECT GREATEST(0, expires_at - ${NOW_US}) / 1000000 AS rem
    FROM ${table} WHERE lock_key = ? AND released = 0) AS r`

/** The table exists? Param: the table's name, and its database (or NULL for the connection's). */
export const tableExistsSql = `SELECT COUNT(*) AS n FROM information_schema.tables
  WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ?`
