/**
 * The bench's PostgreSQL adapters and statement counter: the npm package `advisory-lock` with its defaults
 * (a new connection per lock, `pg_advisory_lock` blocking on it: no lease, no fence), and a hand-written
 * floor with postgres.js: the same one-statement acquire (insert, or take an expired or released row) and
 * one-statement release with `pg_notify`, a waiter retrying on the notification only (the raw LISTEN/NOTIFY
 * round). The floor has a fence column but no engine: no pacing, no uncertain outcomes, no abandon.
 * Statements are counted at a proxy in front of the server (every Execute or simple Query a client sends).
 */
import { randomBytes } from 'node:crypto'
import { connect, createServer, type Server, type Socket } from 'node:net'
import advisoryLockModule from 'advisory-lock'
import postgres from 'postgres'
import type { Adapter, Env } from './adapter.js'

const TTL_MS = 30_000
/** advisory-lock is CommonJS with `exports.default`: under NodeNext its default import is the module object. */
const mutex = (
  advisoryLockModule as unknown as {
    default: (url: string) => (name: string) => { lock(): Promise<() => Promise<void>> }
  }
).default
const FLOOR_TABLE = 'bench_floor_locks'
const FLOOR_CHANNEL = 'bench_floor'

const pgUrl = (env: Env): string => {
  if (!env.postgres) throw new Error('no postgres store was started')
  return env.postgres
}

const advisoryLock: Adapter = {
  name: 'advisory-lock (defaults)',
  store: 'postgres',
  kind: 'peer',
  fences: false,
  waits: true,
  note: 'advisory-lock@2.0.0: a new pg connection per lock(), pg_advisory_lock blocks on it; no lease (a dead holder frees it when its connection drops), no fence',
  async createLocker(env) {
    const createMutex = mutex(pgUrl(env))
    return {
      async acquire(key) {
        const unlock = await createMutex(key).lock()
        return { release: () => unlock() }
      },
      close: async () => {},
    }
  },
}

const FLOOR_ACQUIRE = `INSERT INTO ${FLOOR_TABLE} AS l (name, owner, fence, expires_at) VALUES ($1, $2, 1, clock_timestamp() + $3::float8 * interval '1 millisecond')
  ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = l.fence + 1, expires_at = excluded.expires_at
  WHERE l.expires_at <= clock_timestamp()
  RETURNING fence::text AS fence`
const FLOOR_RELEASE = `WITH r AS (UPDATE ${FLOOR_TABLE} SET expires_at = 'epoch' WHERE name = $1 AND owner = $2 RETURNING name)
  SELECT pg_notify('${FLOOR_CHANNEL}', name) FROM r`

const floor: Adapter = {
  name: 'raw floor: postgres one-statement acquire + release, LISTEN/NOTIFY',
  store: 'postgres',
  kind: 'floor',
  fences: true,
  waits: true,
  note: 'postgres.js: INSERT … ON CONFLICT DO UPDATE … WHERE expired RETURNING fence; release UPDATE + pg_notify in one statement; a waiter retries only when notified',
  async createLocker(env) {
    const sql = postgres(pgUrl(env), { max: 2, onnotice: () => {} })
    await sql.unsafe(
      `CREATE TABLE IF NOT EXISTS ${FLOOR_TABLE} (name text PRIMARY KEY, owner text NOT NULL, fence bigint NOT NULL, expires_at timestamptz NOT NULL)`,
    )
    const wakes = new Map<string, Set<() => void>>()
    await sql.listen(FLOOR_CHANNEL, (key) => {
      for (const wake of wakes.get(key) ?? []) wake()
    })
    const owner = randomBytes(16).toString('hex')
    return {
      async acquire(key) {
        for (;;) {
          // Armed before the attempt, so a release between the attempt and the wait is not missed.
          let wake!: () => void
          const woken = new Promise<void>((resolve) => {
            wake = resolve
          })
          const set = wakes.get(key) ?? new Set()
          set.add(wake)
          wakes.set(key, set)
          const rows = await sql.unsafe(FLOOR_ACQUIRE, [key, owner, TTL_MS], { prepare: true })
          if (rows.length > 0) {
            set.delete(wake)
            return {
              fence: BigInt(rows[0]!.fence as string),
              release: async () => {
                await sql.unsafe(FLOOR_RELEASE, [key, owner], { prepare: true })
              },
            }
          }
          await woken
          set.delete(wake)
        }
      },
      close: () => sql.end({ timeout: 1 }),
    }
  },
}

export const POSTGRES_ADAPTERS: Adapter[] = [advisoryLock, floor]

/**
 * A TCP proxy in front of the server that counts the statements clients send: the frontend messages
 * Execute ('E', extended protocol) and Query ('Q', simple protocol). Each connection starts with a
 * startup message that has no type byte.
 */
export interface StatementCounter {
  readonly port: number
  count(): number
  close(): Promise<void>
}

export async function countStatements(targetPort: number): Promise<StatementCounter> {
  let count = 0
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1')
    sockets.add(client).add(upstream)
    let pending = Buffer.alloc(0)
    let started = false
    client.on('data', (chunk: Buffer) => {
      upstream.write(chunk)
      pending = Buffer.concat([pending, chunk])
      for (;;) {
        if (!started) {
          if (pending.length < 4) break
          const len = pending.readInt32BE(0)
          if (pending.length < len) break
          // An SSLRequest (8 bytes, code 80877103) would be followed by another startup: not used here.
          started = true
          pending = pending.subarray(len)
          continue
        }
        if (pending.length < 5) break
        const len = pending.readInt32BE(1)
        if (pending.length < 1 + len) break
        const type = String.fromCharCode(pending[0]!)
        if (type === 'E' || type === 'Q') count++
        pending = pending.subarray(1 + len)
      }
    })
    upstream.on('data', (chunk: Buffer) => client.write(chunk))
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('close', end).on('error', end)
    upstream.on('close', end).on('error', end)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    count: () => count,
    close: () => {
      for (const s of sockets) s.destroy()
      return new Promise((resolve) => server.close(() => resolve()))
    },
  }
}
