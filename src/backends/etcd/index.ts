/**
 * The etcd backend: etcd's own lock recipe (Go's `concurrency.Mutex`, which `etcdctl lock` also uses), so
 * a Go service and a dlock client on the same prefix exclude each other.
 *
 * - A session per lease length: one etcd lease, kept alive by the client, shared by every lock this
 *   backend takes with that ttl. When etcd says the lease is gone, every lock on it learns at once
 *   (`Grant.lost`).
 * - Acquire is one transaction: if our key does not exist, put it (attached to the session's lease) and
 *   read the first key of the lock's prefix by create revision; else read both. The first key holds the
 *   lock; everybody else waits in create-revision order (FIFO).
 * - Our key is unique per acquisition (`<prefix><lock>/<lease hex>-<owner>`): two acquires through one
 *   session exclude each other (in the Go client they would not).
 * - Fence = the create revision of our key: etcd's revision is global and never goes back, also across
 *   leader changes.
 * - Waiting watches only the key just before ours, from the current revision (then reads it, in case it
 *   went away before the watch began), then re-checks that no earlier key remains and that ours still
 *   exists (a waiter whose lease died while it waited must not be granted: Jepsen's etcd #11456). A
 *   retry of an acquire already in line is that same read, not a transaction.
 */
import type { Etcd3, IKeyValue, IOptions, Lease, Watcher } from 'etcd3'
import { linkedAbort, raceSignal } from '../../core/abort.js'
import type {
  AcquireRequest,
  AttemptResult,
  DoctorFinding,
  Grant,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { BackendUnavailableError } from '../../core/errors.js'
import { checkParams, hostsOf, loadDriver, redact } from '../../core/registry.js'

export interface EtcdBackendOptions {
  /** An `Etcd3` client of the `etcd3` package. dlock never closes it. */
  readonly client: Etcd3
  /** Prefix of every key dlock writes. A lock named `k` lives under `<prefix>k/`. @default 'dlock/' */
  readonly prefix?: string
  /** Names the store in errors. */
  readonly id?: string
}

/** What extend and release need back: our key and its create revision. */
interface Ticket {
  readonly key: string
  readonly revision: string
  readonly session: Session
}

interface Session {
  readonly ttlS: number
  readonly lease: Lease
  /** The lease id, in hex (as Go writes it into key names) and as etcd's decimal string. */
  readonly id: Promise<{ hex: string; decimal: string }>
  /** Aborts when etcd says the lease is gone. */
  readonly lost: AbortController
  /**
   * Until when (our monotonic clock) etcd keeps the lease at least: the send time of the latest
   * acknowledged grant or keep-alive plus the TTL etcd answered with. A lock on this lease is valid no
   * longer than that, whatever its ttl: the key goes with the lease.
   */
  aliveUntil: number
}

const utf8 = (b: Buffer | undefined) => (b ? b.toString('utf8') : '')

/** How much of a lease must remain beyond a lock's ttl before an acquire skips refreshing it. */
const REFRESH_SLACK_MS = 50

/** How long a granted acquire waits for the keep-alive sent beside it before returning without it. */
const REFRESH_WAIT_MS = 1000

/** The first key after every key with `prefix` (etcd's range_end for a prefix). */
function prefixEnd(prefix: string): Buffer {
  const end = Buffer.from(prefix)
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++
      return end.subarray(0, i + 1)
    }
  }
  return Buffer.from([0])
}

/** A lock name as one path segment: '/' and '%' escaped, so `a` never sees the waiters of `a/b`. */
const segment = (key: string) => key.replace(/%/g, '%25').replace(/\//g, '%2F')

/**
 * Creates an etcd backend over your `Etcd3` client.
 * @example
 * const locks = createLockClient(etcdBackend({ client: new Etcd3({ hosts: 'http://127.0.0.1:2379' }) }))
 */
export function etcdBackend(options: EtcdBackendOptions): LockBackend {
  return createEtcdBackend(options, false)
}

function createEtcdBackend(options: EtcdBackendOptions, owned: boolean): LockBackend {
  const { client } = options
  if (!client || typeof client.lease !== 'function') {
    throw new TypeError('Expected `client` to be an Etcd3 instance of the etcd3 package')
  }
  const prefix = options.prefix ?? 'dlock/'
  const id = options.id ?? 'etcd'
  const kv = client.kv
  const sessions = new Map<number, Session>()
  /** Keys of acquires that are waiting in line (refused attempts), by owner. */
  const tickets = new Map<string, Ticket>()

  const lockPrefix = (key: string) => `${prefix}${segment(key)}/`

  /**
   * A watcher on a key nobody writes (the prefix itself), kept while the backend is open: etcd3 closes its
   * watch stream with the last watcher and opens a new one for the next, and a waiter's check right after
   * its wake-up ran 1.5-3 ms slower while the stream was being torn down (measured). One idle stream per
   * client is cheap.
   */
  let streamKeeper: Promise<Watcher | undefined> | undefined
  const keepWatchStream = () => {
    streamKeeper ??= client
      .watch()
      .key(prefix)
      .create()
      .catch(() => {
        streamKeeper = undefined
        return undefined
      })
  }

  const unavailable = (key: string, what: string, error: unknown) => {
    if (error instanceof BackendUnavailableError) return error
    return new BackendUnavailableError(
      `Could not ${what} lock "${key}" on ${id}: ${(error as Error)?.message ?? error}`,
      { key, backend: id, cause: error },
    )
  }

  /** The session for leases of `ttlS` seconds, granted on first use and replaced once lost. */
  const sessionFor = (ttlS: number): Session => {
    const existing = sessions.get(ttlS)
    if (existing && !existing.lost.signal.aborted) return existing
    const grantedFrom = now()
    const lease = client.lease(ttlS)
    const lost = new AbortController()
    const session: Session = {
      ttlS,
      lease,
      lost,
      id: lease.grant().then((decimal) => ({ decimal, hex: BigInt(decimal).toString(16) })),
      aliveUntil: Number.NEGATIVE_INFINITY,
    }
    session.id.then(
      () => {
        session.aliveUntil = Math.max(session.aliveUntil, grantedFrom + ttlS * 1000)
      },
      () => {},
    )
    // etcd3 keeps the lease alive every ttl/3; each acknowledged keep-alive moves aliveUntil (replies come
    // in the order the keep-alives were sent, on one stream).
    const fired: number[] = []
    lease.on('keepaliveFired', () => {
      fired.push(now())
    })
    lease.on('keepaliveSucceeded', (res: { TTL: string }) => {
      const at = fired.shift()
      if (at !== undefined) session.aliveUntil = Math.max(session.aliveUntil, at + Number(res.TTL) * 1000)
    })
    lease.on('keepaliveFailed', () => {
      fired.length = 0
    })
    lease.on('lost', (error: Error) => {
      if (sessions.get(ttlS) === session) sessions.delete(ttlS)
      lost.abort(new Error(`its etcd lease (session) ended: ${error?.message ?? 'lost'}`))
    })
    sessions.set(ttlS, session)
    return session
  }

  /** One keep-alive of the session's lease now; true if etcd still has it (and aliveUntil moved). */
  const keepAlive = async (session: Session): Promise<boolean> => {
    const sentAt = now()
    const alive = await session.lease.keepaliveOnce()
    if (Number(alive.TTL) <= 0) return false
    session.aliveUntil = Math.max(session.aliveUntil, sentAt + Number(alive.TTL) * 1000)
    return true
  }

  /** The key holding the lock: the first under the prefix by create revision. */
  const firstOf = (p: string) => ({
    request_range: {
      key: Buffer.from(p),
      range_end: prefixEnd(p),
      sort_target: 'Create' as const,
      sort_order: 'Ascend' as const,
      limit: 1,
    },
  })

  /**
   * Whether the ticket's key is first in line now: reads the newest key created before it and our key,
   * in one read-only transaction (no raft write): `before` undefined means we are first, `mine` undefined
   * that our key is gone.
   *
   * With `seen` (the revision of a delete we were told of by a watch), the read is serializable: served by
   * the member from what it has applied, without the quorum round of a linearizable read (which waits
   * for the next raft cycle: 3-10 ms here, most of a handoff). It counts only if that member has applied
   * `seen` at least; otherwise it is read again, linearizably. That is enough: keys created before ours
   * can only disappear, so none at a revision >= `seen` means none ever after; and ours existing at that
   * revision means we were first then, while our lease lived. Ours vanishing later is a holder losing its
   * lease, which the session reports (`lost`) as for any holder.
   */
  const check = async (
    ticket: Ticket,
    p: string,
    signal: AbortSignal,
    seen?: string,
  ): Promise<{ before: IKeyValue | undefined; mine: IKeyValue | undefined }> => {
    const serializable = seen !== undefined
    const reply = await raceSignal(
      kv.txn({
        compare: [],
        success: [
          {
            request_range: {
              key: Buffer.from(p),
              range_end: prefixEnd(p),
              max_create_revision: (BigInt(ticket.revision) - 1n).toString(),
              sort_target: 'Create',
              sort_order: 'Descend',
              limit: 1,
              serializable,
            },
          },
          { request_range: { key: Buffer.from(ticket.key), serializable } },
        ],
        failure: [],
      }),
      signal,
    )
    if (serializable && BigInt(reply.header.revision) < BigInt(seen)) return check(ticket, p, signal)
    const before = reply.responses[0]?.response_range.kvs[0]
    const mine = reply.responses[1]?.response_range.kvs[0]
    return { before, mine }
  }

  /**
   * The grant of a ticket that is first in line. Its lease is what remains of the session's from `since`,
   * a moment no earlier than the core's attempt start (validity counts from there), so the lock's validity
   * ends before etcd could expire the session's lease and our key with it. A full ttl would outlast the
   * lease by up to a keep-alive interval when the holder dies right after the grant (the chaos suite's S7
   * found that).
   */
  const grantOf = (ticket: Ticket, since: number): Grant => ({
    granted: true,
    fence: BigInt(ticket.revision),
    ttlMs: Math.min(ticket.session.ttlS * 1000, ticket.session.aliveUntil - since),
    cookie: ticket,
    lost: ticket.session.lost.signal,
  })

  const removeKey = async (ticket: { key: string; revision: string }, signal: AbortSignal) => {
    // Owner-checked: only the key we created (same create revision) is deleted.
    const reply = await raceSignal(
      kv.txn({
        compare: [
          {
            target: 'Create',
            result: 'Equal',
            key: Buffer.from(ticket.key),
            create_revision: ticket.revision,
          },
        ],
        success: [{ request_delete_range: { key: Buffer.from(ticket.key) } }],
        failure: [],
      }),
      signal,
    )
    return reply.succeeded
  }

  return {
    id,
    capabilities: { expiry: 'session', notify: true, fifo: true },

    async tryAcquire(req, signal): Promise<AttemptResult> {
      const started = now()
      // etcd leases are whole seconds (and the server may raise them to its minimum).
      const ttlS = Math.max(1, Math.ceil(req.ttlMs / 1000))
      const p = lockPrefix(req.key)
      try {
        // Already in line (an earlier attempt put our key): a read says whether we are first now, without
        // the transaction's write (a raft round and an fsync).
        const queued = tickets.get(req.owner)
        if (queued && !queued.session.lost.signal.aborted) {
          const { before, mine } = await check(queued, p, signal)
          if (mine?.create_revision === queued.revision) {
            if (before) return { granted: false }
            tickets.delete(req.owner)
            return grantOf(queued, started)
          }
          tickets.delete(req.owner)
        }
        const session = sessionFor(ttlS)
        const lease = await raceSignal(session.id, signal)
        const key = `${p}${lease.hex}-${req.owner}`
        // A lease that etcd is known to keep for less than this lock's ttl is kept alive in the same
        // moment (in parallel: no extra wait), so the grant gets its full ttl from before the request.
        const refresh =
          session.aliveUntil - now() < req.ttlMs + REFRESH_SLACK_MS
            ? keepAlive(session).catch(() => false)
            : undefined
        const reply = await raceSignal(
          kv.txn({
            // Our key exists already when an earlier attempt of this acquire put it (we are in line).
            compare: [{ target: 'Create', result: 'Equal', key: Buffer.from(key), create_revision: 0 }],
            success: [
              { request_put: { key: Buffer.from(key), value: Buffer.from(req.owner), lease: lease.decimal } },
              firstOf(p),
            ],
            failure: [{ request_range: { key: Buffer.from(key) } }, firstOf(p)],
          }),
          signal,
        )
        const revision = reply.succeeded
          ? reply.header.revision
          : reply.responses[0]?.response_range.kvs[0]?.create_revision
        if (revision === undefined) return { granted: false }
        const ticket: Ticket = { key, revision, session }
        const holder = reply.responses[1]?.response_range.kvs[0]
        if (holder && holder.create_revision === revision) {
          tickets.delete(req.owner)
          // Waited for briefly: without it (lease gone, etcd unreachable, a keep-alive that never answers)
          // the grant is only as long as the lease is known to live.
          if (refresh) {
            let timer: NodeJS.Timeout | undefined
            const late = new Promise<void>((resolve) => {
              timer = setTimeout(resolve, REFRESH_WAIT_MS)
            })
            await raceSignal(Promise.race([refresh, late]), signal).finally(() => clearTimeout(timer))
          }
          return grantOf(ticket, started)
        }
        tickets.set(req.owner, ticket)
        return { granted: false }
      } catch (error) {
        if (signal.aborted) throw signal.reason
        throw unavailable(req.key, 'acquire', error)
      }
    },

    async waitForChange(req, signal) {
      const ticket = tickets.get(req.owner)
      if (!ticket) return undefined
      const p = lockPrefix(req.key)
      const link = linkedAbort(signal, ticket.session.lost.signal)
      /** The watcher that woke us, cancelled only after the check that follows its event (see below). */
      let previous: Watcher | undefined
      const cancelPrevious = () => {
        previous?.cancel().catch(() => {})
        previous = undefined
      }
      try {
        keepWatchStream()
        /** The revision of the predecessor's deletion, once a watch told us of it. */
        let seen: string | undefined
        for (;;) {
          const { before, mine } = await check(ticket, p, link.signal, seen)
          // Cancelling a watcher sends a request on the watch stream and closes the stream with the last
          // one: done before this check, it made the check 1.5-3 ms slower (measured).
          cancelPrevious()
          seen = undefined
          // Our key is gone (its lease died while we waited): never a grant; the next attempt re-enters.
          if (!mine || mine.create_revision !== ticket.revision) {
            tickets.delete(req.owner)
            return undefined
          }
          if (!before) {
            tickets.delete(req.owner)
            // Handed over while we waited: the core counts validity from its last refused attempt, which
            // may have begun after this wait did, so the lease left is counted from now.
            return grantOf(ticket, now())
          }
          // Watch only the key just before ours. The watch starts at etcd's current revision, and only then do
          // we make sure that key is still there: a watch from an earlier revision (the one read above) is
          // "unsynced" whenever anything was written meanwhile, and etcd then delivers its events from a
          // background loop that runs every 100 ms (contended handoffs took ~100 ms that way).
          const creating = client.watch().key(before.key).create()
          // A watcher that is still being created when we stop waiting is cancelled once it exists: etcd3
          // would otherwise keep its stream (and reconnect it) for as long as the process lives.
          const watcher = await raceSignal(creating, link.signal).catch((error: unknown) => {
            creating.then((w) => w.cancel()).catch(() => {})
            throw error
          })
          previous = watcher
          {
            const gone = new Promise<void>((resolve) => {
              watcher.once('delete', (kv) => {
                seen = kv.mod_revision
                resolve()
              })
              watcher.once('error', () => resolve())
              link.signal.addEventListener('abort', () => resolve(), { once: true })
            })
            const still = await raceSignal(kv.range({ key: before.key }), link.signal)
            if (still.kvs[0]?.create_revision === before.create_revision) await gone
          }
          if (link.signal.aborted) return undefined
        }
      } catch {
        return undefined
      } finally {
        cancelPrevious()
        link.dispose()
      }
    },

    async extend(lease, _ttlMs, signal) {
      const ticket = lease.cookie as Ticket
      try {
        if (ticket.session.lost.signal.aborted) return { renewed: false }
        const [alive, mine] = await raceSignal(
          Promise.all([keepAlive(ticket.session), kv.range({ key: Buffer.from(ticket.key) })]),
          signal,
        )
        const ok = alive && mine.kvs[0]?.create_revision === ticket.revision
        return ok ? { renewed: true } : { renewed: false }
      } catch (error) {
        throw unavailable(lease.key, 'extend', error)
      }
    },

    async release(lease, signal) {
      try {
        return await removeKey(lease.cookie as Ticket, signal)
      } catch (error) {
        throw unavailable(lease.key, 'release', error)
      }
    },

    async abandon(req: AcquireRequest, signal) {
      const ticket = tickets.get(req.owner)
      if (!ticket) return
      tickets.delete(req.owner)
      await removeKey(ticket, signal)
    },

    async inspect(key, signal): Promise<LockInfo | null> {
      const p = lockPrefix(key)
      try {
        const reply = await raceSignal(kv.range(firstOf(p).request_range), signal)
        const holder = reply.kvs[0]
        if (!holder) return null
        let expiresInMs: number | undefined
        if (holder.lease !== '0') {
          const ttl = await raceSignal(client.leaseClient.leaseTimeToLive({ ID: holder.lease }), signal)
          if (Number(ttl.TTL) >= 0) expiresInMs = Number(ttl.TTL) * 1000
        }
        const value = utf8(holder.value)
        return {
          held: true,
          // Go's Mutex writes an empty value: then the key itself names the holder.
          owner: value === '' ? utf8(holder.key) : value,
          fence: BigInt(holder.create_revision),
          ...(expiresInMs === undefined ? {} : { expiresInMs }),
          ...(value === '' ? { note: `held by a key not written by dlock (${utf8(holder.key)})` } : {}),
        }
      } catch (error) {
        throw unavailable(key, 'inspect', error)
      }
    },

    async doctor(signal): Promise<DoctorFinding[]> {
      const status = await raceSignal(client.maintenance.status(), signal)
      return [
        {
          level: 'info',
          message: `etcd ${status.version}, leader ${status.leader}, raft term ${status.raftTerm}`,
        },
      ]
    },

    async close() {
      const keeper = streamKeeper
      streamKeeper = undefined
      await keeper?.then((w) => w?.cancel()).catch(() => {})
      const all = [...sessions.values()]
      sessions.clear()
      // Revoking a session's lease deletes every key on it at once (what a crash would do after the ttl).
      await Promise.allSettled(all.map((s) => s.lease.revoke()))
      if (owned) client.close()
    },
  }
}

const PARAMS = [] as const

/** `etcd://host1:2379,host2:2379[/prefix]` — the path (if any) replaces the default prefix `dlock/`. */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const etcd3 = await loadDriver('etcd3', 'etcd', url, () => import('etcd3'))
  checkParams(url, PARAMS)
  const path = decodeURIComponent(url.pathname.replace(/^\//, ''))
  const hosts = hostsOf(url).map((h) => `http://${h.includes(':') ? h : `${h}:2379`}`)
  const options: IOptions = {
    hosts,
    dialTimeout: 5000,
    ...(url.username
      ? { auth: { username: decodeURIComponent(url.username), password: decodeURIComponent(url.password) } }
      : {}),
  }
  const client = new etcd3.Etcd3(options)
  return createEtcdBackend(
    { client, ...(path ? { prefix: path.endsWith('/') ? path : `${path}/` } : {}), id: redact(url) },
    true,
  )
}
