/**
 * The semaphore bench's hand-written floors on the stores other than Redis and memory (those two are in
 * semaphores.ts): for each store, the least work it allows for a counting semaphore whose permits expire on
 * the store's clock (but on file, see there), written directly with the client the project already uses.
 * Each floor is safe (never more than `limit` permits granted at once: scenario t counts overlaps, h and r
 * fail a row whose waiter is granted while the limit is held) but has no line order, no stored
 * limit, no renewal beyond what the store does for free, no lost-reply recovery and no abandon: what is left
 * is the store's own cost of counting, which fencelock's row is compared with. Every floor keeps its state
 * apart from fencelock's (its own tables, prefix, root or folder). Over 300 lines: five floors of a few
 * dozen lines each, kept side by side so that they read as one comparison.
 */
import { mkdirSync, watch } from 'node:fs'
import { open, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Etcd3, type Watcher } from 'etcd3'
import { createConnection } from 'mysql2/promise'
import zookeeper from 'node-zookeeper-client'
import postgres from 'postgres'
import { serverOf } from './mysql.js'
import type { SemaphoreAdapter } from './semaphores.js'
import { armed } from './wake.js'
import { call, connected, sequence } from './zookeeper.js'

let permitIds = 0
/** A permit id unique across the bench's contenders (one process): the floors' here, and Redis's. */
export const permitId = () => `${process.pid}-${permitIds++}`

/**
 * The waiters of each name (a semaphore, a prefix), woken together when its release is heard. `arm` before
 * the try it follows, so a release between the try and the wait is not missed; `disarm` once done waiting.
 */
class Bells {
  readonly #waiting = new Map<string, Set<() => void>>()

  arm(name: string): { woken: Promise<void>; disarm: () => void } {
    const { woken, wake } = armed()
    const wakes = this.#waiting.get(name) ?? new Set()
    this.#waiting.set(name, wakes)
    wakes.add(wake)
    return { woken, disarm: () => wakes.delete(wake) }
  }

  ring(name: string): void {
    for (const wake of this.#waiting.get(name) ?? []) wake()
  }
}

/** Runs `make` once per key (a table per server, a folder per contender); later callers share its promise. */
function oncePer(): (key: string, make: () => unknown) => Promise<unknown> {
  const made = new Map<string, Promise<unknown>>()
  return (key, make) => {
    let done = made.get(key)
    if (done === undefined) {
      done = Promise.resolve().then(make)
      made.set(key, done)
    }
    return done
  }
}

/**
 * PostgreSQL: one round trip per acquire, a function created once that serialises the semaphore's acquires
 * with `pg_advisory_xact_lock` and counts its unexpired rows by `clock_timestamp()` (the server's clock);
 * one per release, a DELETE that notifies in the same statement. Waiting is LISTEN/NOTIFY: a waiter tries
 * again only when a release of its semaphore is announced (every listener hears it: NOTIFY has no
 * wake-one). Each statement of the function takes a new snapshot (read committed, the server's default),
 * so the count sees every commit made before the advisory lock was ours.
 */
const PG_SETUP = `CREATE TABLE IF NOT EXISTS bench_sem_floor_permits (
  name text NOT NULL, id text NOT NULL, expires_at timestamptz NOT NULL, PRIMARY KEY (name, id));
CREATE OR REPLACE FUNCTION bench_sem_floor_acquire(sem text, permit text, permit_limit int, ttl_ms float8)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('bench_sem_floor:' || sem));
  DELETE FROM bench_sem_floor_permits p WHERE p.name = sem AND p.expires_at <= clock_timestamp();
  IF (SELECT count(*) FROM bench_sem_floor_permits p WHERE p.name = sem) >= permit_limit THEN
    RETURN false;
  END IF;
  INSERT INTO bench_sem_floor_permits VALUES (sem, permit, clock_timestamp() + ttl_ms * interval '1 millisecond');
  RETURN true;
END $$;`
const PG_RELEASE = `WITH d AS (DELETE FROM bench_sem_floor_permits WHERE name = $1 AND id = $2 RETURNING name)
  SELECT pg_notify('bench_sem_floor', name) FROM d`
/** The table and function, made once per server by the first contender (concurrent CREATEs collide). */
const pgSetup = oncePer()

const postgresFloor: SemaphoreAdapter = {
  name: 'raw floor: postgres function (advisory xact lock, count, insert) + NOTIFY',
  store: 'postgres',
  kind: 'floor',
  note: 'one statement per try (a plpgsql function: pg_advisory_xact_lock, count by clock_timestamp(), insert), DELETE + pg_notify to release; a waiter tries again when notified; no line, no renewal',
  async contender(env, ttlMs) {
    if (!env.postgres) throw new Error('no postgres store was started')
    const sql = postgres(env.postgres, { max: 1, onnotice: () => {} })
    await pgSetup(env.postgres, () => sql.unsafe(PG_SETUP).simple())
    const bells = new Bells()
    await sql.listen('bench_sem_floor', (name) => bells.ring(name))
    return {
      async acquire(name, limit) {
        const id = permitId()
        for (;;) {
          const bell = bells.arm(name)
          try {
            const [row] = await sql.unsafe('SELECT bench_sem_floor_acquire($1, $2, $3, $4) AS granted', [
              name,
              id,
              limit,
              ttlMs,
            ])
            if (row?.granted) return { release: async () => void (await sql.unsafe(PG_RELEASE, [name, id])) }
            await bell.woken
          } finally {
            bell.disarm()
          }
        }
      },
      close: () => sql.end({ timeout: 1 }),
    }
  },
}

/**
 * MySQL/MariaDB: a transaction of two statements, the least that counts atomically: an INSERT … ON
 * DUPLICATE KEY UPDATE that makes the semaphore's row and locks it (the acquires of one semaphore queue on
 * it), and an INSERT … SELECT that adds the permit when the unexpired ones, by `SYSDATE(6)` on the server's
 * clock in microseconds since the epoch (no session time zone involved), are fewer than the limit; its
 * SELECT reads with locks, so it sees the latest commits under any isolation level. A release is one DELETE. MySQL has no notification a client can wait on, so a waiter polls every 5 ms.
 */
const MYSQL_POLL_MS = 5
const MYSQL_NOW_US = 'CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)'
const mysqlSetup = oncePer()

const mysqlFloor: SemaphoreAdapter = {
  name: 'raw floor: mysql transaction (lock the semaphore row, count, insert), 5 ms poll',
  store: 'mysql',
  kind: 'floor',
  note: 'BEGIN, INSERT … ON DUPLICATE KEY UPDATE locking the semaphore row, INSERT … SELECT when the unexpired permits (SYSDATE(6)) are fewer than the limit, COMMIT; DELETE to release; MySQL cannot notify: a waiter polls every 5 ms',
  async contender(env, ttlMs) {
    const server = serverOf(env)
    const connection = await createConnection(server)
    const key = `${server.host}:${server.port}`
    await mysqlSetup(key, async () => {
      await connection.query(
        'CREATE TABLE IF NOT EXISTS bench_sem_floor (name VARBINARY(255) PRIMARY KEY) ENGINE=InnoDB',
      )
      await connection.query(`CREATE TABLE IF NOT EXISTS bench_sem_floor_permits (name VARBINARY(255) NOT NULL,
        id VARBINARY(64) NOT NULL, expires_us BIGINT NOT NULL, PRIMARY KEY (name, id)) ENGINE=InnoDB`)
    })
    /** One try, in one transaction: true when the permit was added. */
    const tryOnce = async (name: string, id: string, limit: number) => {
      await connection.query('BEGIN')
      try {
        await connection.execute(
          'INSERT INTO bench_sem_floor (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name',
          [name],
        )
        const [added] = await connection.execute(
          `INSERT INTO bench_sem_floor_permits (name, id, expires_us) SELECT ?, ?, ${MYSQL_NOW_US} + ?
           FROM DUAL WHERE (SELECT COUNT(*) FROM bench_sem_floor_permits
             WHERE name = ? AND expires_us > ${MYSQL_NOW_US}) < ?`,
          [name, id, ttlMs * 1000, name, limit],
        )
        await connection.query('COMMIT')
        return (added as { affectedRows: number }).affectedRows === 1
      } catch (error) {
        await connection.query('ROLLBACK')
        // Deadlock with a release on the permits' index: InnoDB rolled the try back; try again.
        if ((error as { code?: string }).code === 'ER_LOCK_DEADLOCK') return false
        throw error
      }
    }
    return {
      async acquire(name, limit) {
        const id = permitId()
        while (!(await tryOnce(name, id, limit))) await sleep(MYSQL_POLL_MS)
        return {
          release: async () => {
            await connection.execute('DELETE FROM bench_sem_floor_permits WHERE name = ? AND id = ?', [
              name,
              id,
            ])
          },
        }
      },
      close: () => connection.end(),
    }
  },
}

/**
 * etcd: one transaction per acquire that puts the permit's key under the semaphore's prefix on the client's
 * lease (its expiry on the server, kept alive by etcd3 for the contender's life, as a session) and ranges the
 * first `limit` keys of the prefix by create revision: granted when ours is among them. Each contender
 * watches a semaphore's prefix from its first acquire on (one watch per semaphore per client, kept, as
 * fencelock's), and a waiter ranges again at each delete. A release deletes the key.
 */
const etcdFloor: SemaphoreAdapter = {
  name: 'raw floor: etcd put on a lease + range first limit by create revision, watch',
  store: 'etcd',
  kind: 'floor',
  note: 'one txn (put on the client’s lease, range the first limit keys by create revision), a kept prefix watch per semaphore wakes the waiters, delete to release; one lease kept alive per contender',
  async contender(env, ttlMs) {
    const client = new Etcd3({ hosts: `http://${env.etcd}` })
    const lease = client.lease(Math.max(1, Math.ceil(ttlMs / 1000)))
    lease.on('lost', () => {})
    const leaseId = await lease.grant()
    const firstKeys = (prefix: string, limit: number) =>
      client.getAll().prefix(prefix).sort('Create', 'Ascend').limit(limit)
    /** Per semaphore prefix, the watch (made before the first put), which rings its bell at a delete. */
    const watched = new Map<string, Promise<Watcher>>()
    const bells = new Bells()
    const watching = (prefix: string) => {
      let watcher = watched.get(prefix)
      if (!watcher) {
        watcher = client.watch().prefix(prefix).create()
        watcher.then(
          (w) => w.on('delete', () => bells.ring(prefix)),
          () => {},
        )
        watched.set(prefix, watcher)
      }
      return watcher
    }
    return {
      async acquire(name, limit) {
        const prefix = `bench-sem-floor/${name}/`
        const key = `${prefix}${permitId()}`
        await watching(prefix)
        // Armed before the put: a delete between the txn's range and the wait is not missed.
        let bell = bells.arm(prefix)
        try {
          const put = await client
            .if(key, 'Create', '==', 0)
            .then(client.put(key).value('').lease(leaseId), firstKeys(prefix, limit))
            .commit()
          let first = put.responses[1]!.response_range.kvs.map((kv) => kv.key.toString())
          while (!first.includes(key)) {
            await bell.woken
            bell.disarm()
            bell = bells.arm(prefix)
            first = await firstKeys(prefix, limit).keys()
          }
        } finally {
          bell.disarm()
        }
        return { release: async () => void (await client.delete().key(key)) }
      },
      close: async () => {
        await Promise.all([...watched.values()].map(async (w) => (await w).cancel()))
        await lease.revoke().catch(() => {})
        client.close()
      },
    }
  },
}

/**
 * File, on one host: one file per slot, `slot-0` … `slot-<limit-1>`, each taken by an exclusive create
 * (`O_CREAT|O_EXCL`, atomic on a local file system) and freed by unlink: no count to keep, since the slots
 * are the count. A waiter watches the folder (inotify) and tries the slots again at each removal, and every
 * 100 ms in case a notification is lost. No expiry: taking a dead holder's slot over safely needs more
 * than a file system's calls give (two takers racing on an mtime both unlink, and one removes the other's
 * fresh file); fencelock's file backend keeps a record and the boot id for it. The floor is the cost of the
 * exclusion alone, and is never more than `limit` holders because a slot file exists once.
 */
const FILE_RETRY_MS = 100

const fileFloor: SemaphoreAdapter = {
  name: 'raw floor: file, one exclusive-create file per slot, fs.watch',
  store: 'file',
  kind: 'floor',
  note: 'open(O_EXCL) of slot-0 … slot-(limit-1), unlink to release; a waiter watches the folder (and tries every 100 ms); no expiry of a dead holder’s slot',
  async contender(env) {
    const made = oncePer()
    /** The slot taken, or undefined when all `limit` are. */
    const trySlots = async (folder: string, limit: number) => {
      for (let slot = 0; slot < limit; slot++) {
        const path = join(folder, `slot-${slot}`)
        try {
          await (await open(path, 'wx')).close()
          return path
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
        }
      }
      return undefined
    }
    return {
      async acquire(name, limit) {
        const folder = join(env.dir, 'semaphore-floor', name)
        await made(folder, () => mkdirSync(folder, { recursive: true }))
        let path = await trySlots(folder, limit)
        if (path === undefined) {
          // Watching before the next try: a removal between the try and the wait is not missed.
          let { woken, wake } = armed()
          const watcher = watch(folder, () => wake())
          try {
            for (;;) {
              path = await trySlots(folder, limit)
              if (path !== undefined) break
              await Promise.race([woken, sleep(FILE_RETRY_MS)])
              ;({ woken, wake } = armed())
            }
          } finally {
            watcher.close()
          }
        }
        const held = path
        return { release: () => unlink(held) }
      },
      close: async () => {},
    }
  },
}

/**
 * ZooKeeper: the counting recipe (Curator's `InterProcessSemaphoreV2` without its admission lock): an
 * EPHEMERAL_SEQUENTIAL lease node under the semaphore's node, created on a session of the bench's ttl (the
 * permit ends with the session, on the servers' clock), and the children listed in the same round trip
 * (pipelined: a session's requests are answered in order); granted when the node is among the first
 * `limit` by sequence. A waiter lists again with a child watch and waits for it to fire: any removal ahead
 * may let it in, so no single node ahead is the one to watch (each release wakes every waiter of the
 * semaphore). A release deletes the node.
 */
const zookeeperFloor: SemaphoreAdapter = {
  name: 'raw floor: zookeeper ephemeral sequential lease + first limit, child watch',
  store: 'zookeeper',
  kind: 'floor',
  note: 'one session per contender; create EPHEMERAL_SEQUENTIAL + getChildren pipelined; a waiter lists with a child watch; delete to release; no admission lock',
  async contender(env, ttlMs) {
    const client = await connected(env, ttlMs)
    const made = oncePer()
    const children = (dir: string, watcher?: () => void) =>
      call<string[]>((done) =>
        watcher ? client.getChildren(dir, watcher, done) : client.getChildren(dir, done),
      )
    /** Whether `name` is among the first `limit` children by sequence. */
    const admitted = (listed: string[], name: string, limit: number) =>
      listed.map(sequence).sort().slice(0, limit).includes(sequence(name))
    return {
      async acquire(semaphore, limit) {
        const dir = `/bench-sem-floor/${semaphore}`
        await made(dir, () => call<string>((done) => client.mkdirp(dir, done)))
        const created = call<string>((done) =>
          client.create(`${dir}/lease-`, zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL, done),
        )
        const listed = children(dir)
        listed.catch(() => {})
        const path = await created
        const name = path.slice(dir.length + 1)
        if (!admitted(await listed, name, limit)) {
          for (;;) {
            const { woken, wake } = armed()
            if (admitted(await children(dir, wake), name, limit)) break
            await woken
          }
        }
        return { release: () => call<void>((done) => client.remove(path, (error) => done(error, undefined))) }
      },
      close: async () => client.close(),
    }
  },
}

/** The floors of this file, by store. */
export const SEMAPHORE_FLOORS: SemaphoreAdapter[] = [
  fileFloor,
  etcdFloor,
  postgresFloor,
  mysqlFloor,
  zookeeperFloor,
]
