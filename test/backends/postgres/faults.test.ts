/**
 * PostgreSQL beyond the conformance suite, on one real server: fences across a restart, killed
 * connections (the listening one too), a paused holder process, a partition through the test proxy, the
 * fence guard, the table's DDL when createTable is off, and doctor.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import postgres from 'postgres'
import { guardedUpdate, postgresBackend } from '../../../src/backends/postgres/index.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { settle, trackUnhandledRejections } from '../../core/fakes.js'
import { adminQuery } from '../../kits/postgres.js'
import { type PostgresServer, startPostgres } from '../../servers/postgres.js'
import { ServerProcess } from '../../servers/process.js'
import { awaitLater } from '../../support/later.js'
import { startHold } from '../../support/processes.js'
import { startProxy } from '../../support/proxy.js'
import { tempDir } from '../../support/temp.js'
import { abortedWithin, waitUntil } from '../../support/wait.js'

describe('postgres: faults, the fence guard, the table, doctor', { timeout: 180_000 }, () => {
  let server: PostgresServer
  const open: LockClient[] = []
  const client = (url = server.url(), options: Parameters<typeof createLockClient>[1] = {}) => {
    const c = createLockClient(url, { ttl: '3s', ...options })
    open.push(c)
    return c
  }
  before(async () => {
    server = await startPostgres()
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await server.destroy()
  })

  it('refuses a key with NUL at the call (text cannot hold it), not as an outage', async () => {
    const locks = client()
    const calls = [() => locks.acquire('nul\0key', { timeout: '10s' }), () => locks.inspect('nul\0key')]
    for (const call of calls) {
      await assert.rejects(call(), (error: unknown) => {
        assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
        assert.match(error.message, /without NUL .* on postgres:\/\/.*at index 3/)
        return true
      })
    }
  })

  it('says what it could not do in plain words when nothing listens on the port', async () => {
    const url = 'postgres://fencelock@127.0.0.1:1/db'
    await assert.rejects(client(url).tryAcquire('k'), (error: Error) => {
      assert.match(
        error.message,
        /^Could not check the lock table on postgres:\/\/fencelock@127\.0\.0\.1:1\/db: /,
      )
      assert.doesNotMatch(error.message, /\b(of|on) on\b/)
      return true
    })
  })

  it('keeps fences across a server restart, and the same client works again after it', async () => {
    const locks = client()
    const first = await locks.acquire('restart')
    await first.release()
    await server.restart()
    const second = await locks.acquire('restart', { timeout: '20s' })
    assert.ok(second.fence > first.fence, `fence ${second.fence} after a restart, ${first.fence} before`)
    await second.release()
    server.signal('SIGKILL')
    await server.restart()
    const third = await locks.acquire('restart', { timeout: '20s' })
    assert.ok(third.fence > second.fence, 'and across a crash')
    await third.release()
  })

  it('waiting recovers when every connection of the waiter is killed, the listening one included', async () => {
    const holder = client()
    const waiter = client()
    const lock = await holder.acquire('killed')
    const waiting = awaitLater(waiter.acquire('killed', { timeout: '30s' }))
    // The waiter's LISTEN connection is up (its probe came back) before we kill everything.
    await waitUntil(async () => (await listeners()) > 0, 'a LISTEN connection', { withinMs: 10_000 })
    const killed = await adminQuery<{ n: number }>(
      server,
      'SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = $1',
      ['client backend'],
    )
    assert.ok(killed[0]!.n >= 2, 'the holder, the waiter and its listening connection were killed')
    await lock.release()
    const next = await waiting
    assert.ok(next.fence > lock.fence)
    // Notifications resume: postgres.js subscribes again on a new connection.
    await waitUntil(async () => (await listeners()) > 0, 'LISTEN again', { withinMs: 15_000 })
    await next.release()
  })

  it('a connection terminated before its first statement is answered leaves no unhandled rejection', async () => {
    // postgres.js reads the server's array types on each new connection unless told not to, in a promise
    // nobody awaits: a connection terminated during that read made an unhandled rejection (57P01) once the
    // client reconnected, which ends a Node process. The first statement after the handshake is held at
    // the proxy, so the termination lands while it waits.
    const unhandled = trackUnhandledRejections()
    const proxy = await startProxy(server.port)
    let held: string | undefined
    proxy.filter = (chunk, direction) => {
      // A Parse ('P') or simple Query ('Q') message: the first statement, not the startup message.
      if (held !== undefined || direction !== 'request' || !/^[PQ]/.test(chunk.toString('latin1', 0, 1)))
        return true
      held = chunk.toString('latin1', 5).replace(/\s+/g, ' ').slice(0, 80)
      return false
    }
    try {
      const locks = client(`postgres://postgres@127.0.0.1:${proxy.port}/postgres`)
      const acquiring = awaitLater(locks.acquire('terminated', { timeout: '30s' }))
      await waitUntil(() => held !== undefined, 'the first statement at the proxy', { withinMs: 10_000 })
      await adminQuery(
        server,
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = $1',
        ['client backend'],
      )
      const lock = await acquiring
      await lock.release()
      await settle()
      assert.deepEqual(unhandled, [], `held: ${held}`)
    } finally {
      await proxy.close()
    }
  })

  it('a paused holder process loses its lock to the next holder, whose fence is greater', async () => {
    const hold = startHold(server.url(), 'paused', ['--ttl', '1s'])
    try {
      const got = await hold.next('acquired')
      hold.child.kill('SIGSTOP')
      const lock = await client().acquire('paused', { timeout: '20s' })
      assert.ok(BigInt(got.fence as string) < lock.fence)
      hold.child.kill('SIGCONT')
      await hold.next('lost')
      await lock.release()
    } finally {
      hold.child.kill('SIGKILL')
    }
  })

  it('a partitioned holder loses its lock by its validity; the others take it after the ttl', async () => {
    const proxy = await startProxy(server.port)
    try {
      const cut = client(`postgres://postgres@127.0.0.1:${proxy.port}/postgres`, { ttl: '1s' })
      const lock = await cut.acquire('partition')
      proxy.mode = 'blackhole'
      await abortedWithin(lock.signal, 10_000)
      const other = await client().acquire('partition', { timeout: '20s' })
      assert.ok(other.fence > lock.fence)
      await other.release()
      proxy.mode = 'pass'
      proxy.cut()
      const again = await cut.acquire('partition', { timeout: '30s' })
      assert.ok(again.fence > other.fence)
      await again.release()
    } finally {
      await proxy.close()
    }
  })

  it('the fence guard rejects the write of a paused holder once the next holder has written', async () => {
    const sql = postgres(server.url(), { max: 2, onnotice: () => {} })
    try {
      await sql.unsafe('CREATE TABLE report (id int PRIMARY KEY, body text, fence bigint)')
      await sql.unsafe("INSERT INTO report VALUES (7, 'empty', NULL)")
      const locks = client(server.url(), { ttl: 500 })
      // The first holder "pauses": it stops renewing, its lease ends, and it writes only afterwards.
      const stale = await locks.acquire('report:7', { renew: false })
      const write = (body: string, fence: bigint) =>
        guardedUpdate(sql, { table: 'report', set: { body }, where: { id: 7 }, fence })
      assert.equal(await write('first', stale.fence), true)
      const next = await locks.acquire('report:7', { timeout: '10s' })
      assert.equal(await write('second', next.fence), true)
      assert.equal(await write('second, again', next.fence), true, 'a holder may write more than once')
      assert.equal(await write('stale', stale.fence), false, 'the paused holder is refused')
      const rows = await sql.unsafe('SELECT body, fence::text AS fence FROM report WHERE id = 7')
      assert.deepEqual([rows[0]!.body, rows[0]!.fence], ['second, again', String(next.fence)])
      await next.release()
    } finally {
      await sql.end({ timeout: 1 })
    }
  })

  it('with ?createTable=false a missing table is an error naming it with its DDL', async () => {
    const locks = client(server.url('?table=not_made&createTable=false'))
    await assert.rejects(locks.acquire('t', { timeout: '5s' }), (error: Error) => {
      assert.match(error.message, /"public"\."not_made" does not exist/)
      assert.match(error.message, /CREATE TABLE IF NOT EXISTS "public"\."not_made"/)
      return true
    })
    const made = client(server.url('?table=made_here&schema=public'))
    await (await made.acquire('t')).release()
    const exists = await adminQuery<{ ok: boolean }>(
      server,
      "SELECT to_regclass('public.made_here') IS NOT NULL AS ok",
    )
    assert.equal(exists[0]!.ok, true)
  })

  it('doctor reports the version, the replication settings, the table and sequence, notifications', async () => {
    const sql = postgres(server.url(), { max: 2, onnotice: () => {} })
    const backend = postgresBackend({ sql, table: 'doctor_locks' })
    try {
      const before = await backend.doctor!(AbortSignal.timeout(10_000))
      assert.ok(before.some((f) => f.level === 'ok' && /PostgreSQL 15/.test(f.message)))
      // No standby streams from the test server: no failover warning.
      assert.ok(before.some((f) => f.level === 'ok' && /no standby streams/.test(f.message)))
      assert.ok(!before.some((f) => f.level === 'warn' && /failover/.test(f.message)))
      assert.ok(
        before.some((f) => /does not exist yet.*\n.*CREATE TABLE.*\n.*CREATE SEQUENCE/s.test(f.message)),
      )
      const locks = createLockClient(backend, { renew: false })
      // One name released (its row retired), one held: the table keeps the held one alone.
      await (await locks.tryAcquire('d'))!.release()
      const held = (await locks.tryAcquire('h', { ttl: 60_000 }))!
      const findings = await backend.doctor!(AbortSignal.timeout(10_000))
      assert.ok(findings.some((f) => f.level === 'ok' && /notifications work/.test(f.message)))
      assert.ok(
        findings.some((f) => f.level === 'ok' && /keeps 1 lock name\(s\), 1 held now/.test(f.message)),
        JSON.stringify(findings),
      )
      assert.ok(findings.some((f) => f.level === 'ok' && /fences come from the sequence/.test(f.message)))
      // A sequence set back behind the table's fences is a hazard doctor names.
      await sql.unsafe(`SELECT setval('"public"."doctor_locks_fence"', 1)`)
      const behind = await backend.doctor!(AbortSignal.timeout(10_000))
      assert.ok(
        behind.some((f) => f.level === 'warn' && /is behind the table's largest fence/.test(f.message)),
      )
      // A WAL receiver streams from the server (as a standby would): now the failover warning.
      const folder = tempDir('pg-receivewal')
      const receiver = new ServerProcess(
        'pg_receivewal',
        '/usr/lib/postgresql/15/bin/pg_receivewal',
        ['-D', folder.path, '-h', '127.0.0.1', '-p', String(server.port), '-U', 'postgres', '--no-sync'],
        folder.path,
      )
      try {
        await waitUntil(
          async () => (await adminQuery(server, 'SELECT 1 FROM pg_stat_replication')).length > 0,
          'pg_receivewal in pg_stat_replication',
          { withinMs: 20_000 },
        )
        const streamed = await backend.doctor!(AbortSignal.timeout(10_000))
        assert.ok(
          streamed.some(
            (f) => f.level === 'warn' && /1 standby\(s\) stream.*asynchronously.*failover/.test(f.message),
          ),
          JSON.stringify(streamed),
        )
      } finally {
        await receiver.stop()
        folder.cleanup()
      }
      await held.release()
      await locks.close()
    } finally {
      await sql.end({ timeout: 1 })
    }
  })

  /** LISTEN connections on the server now. */
  async function listeners(): Promise<number> {
    const rows = await adminQuery<{ n: number }>(
      server,
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE query ILIKE 'listen %' AND pid <> pg_backend_pid()",
    )
    return rows[0]!.n
  }
})
