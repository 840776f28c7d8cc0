/**
 * Redlock: one lock over N independent Redis masters, as the Redlock specification describes it, built as
 * a quorum over the single-node Redis backend (its scripts run unchanged on each node).
 *
 * - Every operation goes to all nodes at once; each node has `nodeTimeout` to answer, and a verdict is
 *   reached as soon as a majority (N/2+1) has answered one way: a slow node never stalls the others.
 * - Validity: the core times every attempt from before the first request on its monotonic clock, and keeps
 *   TTL - elapsed - (TTL x drift + 2 ms); a grant whose validity is gone is released.
 * - A failed attempt is released on every node, answered or not (a late grant is removed too: each node's
 *   release travels on the same connection after its acquire). The core retries after a jittered delay.
 * - Each attempt writes its own owner id on the nodes, `<owner>.<attempt>`: the clean-up of a failed
 *   attempt can then never delete the hold of a later attempt of the same acquire, whatever order the
 *   commands reach a node in (a script re-sent after NOSCRIPT goes out one round trip late, after the
 *   next attempt's acquire). With one owner id for all attempts that happened, and made two holders.
 * - Fencing, which no other Redlock library has: each node's acquire script increments that node's fence
 *   counter and returns it; the grant's token is the maximum M over the granting majority, written back
 *   (`counter = max(counter, M)`) to the majority's nodes that were behind, before the grant counts. Any
 *   later majority shares a node with this one, so it mints a larger M. When every node of the majority
 *   already returned M (the nodes are in step, the usual case) nothing is written back and a grant costs
 *   one round trip. The node index sits in the low 8 bits, so grants from different nodes never share a
 *   token.
 * - Delayed restart: see node.ts. Admission (fences after restarts): a node votes only once its fence
 *   counters have been caught up from the other nodes after it (re)started; see admission.ts for how and
 *   why (invariant J), and node.ts for where it is checked (once per connection, off the acquire path).
 */
import type { Redis, RedisOptions } from 'ioredis'
import { linkedAbort } from '../../core/abort.js'
import type {
  AttemptResult,
  DoctorFinding,
  ExtendResult,
  HeldLease,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { type NodeFailure, QuorumError } from '../../core/errors.js'
import { DEFAULT_TTL_MS } from '../../core/options.js'
import { hostsOf, loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { redisBackend } from '../redis/index.js'
import { catchUp } from './admission.js'
import { RedlockNode } from './node.js'
import { majorityVerdict, round, tally, type Votes } from './quorum.js'

export interface RedlockBackendOptions {
  /**
   * One ioredis client per independent Redis master (use an odd number: 3, 5, 7). Create them with
   * `autoResendUnfulfilledCommands: false` (a command resent after a reconnect could run on a restarted
   * server before fencelock has checked it) and preferably `enableOfflineQueue: false` (a down node fails at
   * once instead of queueing).
   */
  readonly clients: readonly Redis[]
  /**
   * Prefix of every key fencelock writes on the nodes, including each node's admission marker
   * `<prefix>!admitted` (see admission.ts). @default 'fencelock:'
   */
  readonly prefix?: string | undefined
  /**
   * How long one node may take to answer before it counts as failed in that round.
   * @default ttl / 100, between 20 ms and 200 ms
   */
  readonly nodeTimeoutMs?: number | undefined
  /**
   * A node whose server has been up for less than this does not count toward a quorum (the Redlock
   * spec's delayed restart; set it to the largest ttl any client uses on these nodes). 0 turns it off,
   * which is safe only if every node persists each write (`appendonly yes`, `appendfsync always`).
   * @default the largest ttl this backend has been asked for
   */
  readonly restartDelayMs?: number | undefined
  /** Names the store in errors. */
  readonly id?: string | undefined
}

/** The lease as the nodes know it: owned by the granting attempt's owner id (the grant's cookie). */
const onNodes = (lease: HeldLease): HeldLease =>
  typeof lease.cookie === 'string' ? { ...lease, owner: lease.cookie } : lease

/** The acquire's owner id of a node-side owner id `<owner>.<attempt>` (other writers' values unchanged). */
const acquireOwner = (owner: string) => owner.replace(/^([0-9a-f]{32})\.[0-9a-z]+$/, '$1')

/** The reason given to node operations this backend stops itself (a cheap shared value, no stack). */
const STOPPED = Object.freeze({ name: 'Stopped', message: 'stopped by the Redlock backend' })

/** The longest pause before a contended waiter re-attempts after a wake-up (see `refusals`). */
const SPREAD_MS = 2

/** A node's admission state, as `fencelock doctor` reports it. */
function admissionFinding(node: RedlockNode): DoctorFinding {
  const { state, reason } = node.admission
  switch (state) {
    case 'admitted':
      return { level: 'ok', message: 'admitted: its fence counters are caught up since its server started' }
    case 'bootstrap':
      return { level: 'warn', message: `waiting for bootstrap, does not vote yet: ${reason}` }
    case 'catching-up':
      return {
        level: 'warn',
        message: `catching up, does not vote yet: ${reason ?? 'copying the fence counters of the other nodes'}`,
      }
    default:
      return { level: 'warn', message: 'admission unknown: its connection was lost during the check' }
  }
}

/** FNV-1a: a cheap, stable spread of keys over nodes. */
function hash(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193)
  return h >>> 0
}

/** Bits of a Redlock fence that hold the index of the node that minted it. */
const NODE_BITS = 8n
const MAX_NODES = 1 << Number(NODE_BITS)

/**
 * Creates a Redlock backend over your ioredis clients (the backend never closes them).
 * @example
 * const nodes = [6379, 6380, 6381].map((port) => new Redis({ port, autoResendUnfulfilledCommands: false }))
 * const locks = createLockClient(redlockBackend({ clients: nodes }), { ttl: '10s' })
 */
export function redlockBackend(options: RedlockBackendOptions): LockBackend {
  for (const c of options.clients ?? []) {
    if (c?.options?.autoResendUnfulfilledCommands !== false) {
      throw new TypeError(
        'Expected every Redlock client to be created with `autoResendUnfulfilledCommands: false`: ioredis would ' +
          'otherwise resend a lock command after a reconnect, possibly to a restarted server that must not ' +
          'count toward a quorum yet',
      )
    }
  }
  return createRedlockBackend(options, [])
}

function createRedlockBackend(options: RedlockBackendOptions, owned: Redis[]): LockBackend {
  const clients = options.clients ?? []
  if (clients.length === 0 || clients.length > MAX_NODES) {
    throw new TypeError(`Expected 1 to ${MAX_NODES} Redis clients in \`clients\`, got ${clients.length}`)
  }
  const n = clients.length
  const q = Math.floor(n / 2) + 1
  const nodes: RedlockNode[] = clients.map((client, i) => {
    const backend = redisBackend({
      client,
      ...(options.prefix === undefined ? {} : { prefix: options.prefix }),
    })
    return new RedlockNode(
      i,
      backend.id,
      client,
      backend,
      (node, delayMs, closed) => catchUp(node, nodes, q, delayMs, closed),
      // restartDelay; when it is not set and this client has used no ttl yet (an inspect or the doctor),
      // the default ttl: a catch-up must come after every grant a restarted node voted in has ended.
      () => options.restartDelayMs ?? (largestTtl || DEFAULT_TTL_MS),
    )
  })
  const id = options.id ?? `redlock://${nodes.map((node) => node.id.replace(/^rediss?:\/\//, '')).join(',')}`
  const heard = new RecentReleases(() => 2 * defaultTimeout())
  /**
   * Attempts refused so far, per acquire still waiting. A waiter that has lost a race after a wake-up
   * knows others wait too; it then re-attempts after a random pause of up to SPREAD_MS instead of at once,
   * so the first of them reaches every node before the next starts and takes the majority cleanly. Without
   * it, waiters woken by the same release, in different processes, reach the nodes in different orders,
   * each gets a minority (a split), all release and retry, and throughput collapses. A lone waiter never
   * loses a race, so its handoff is not delayed.
   */
  const refusals = new Map<string, number>()
  /**
   * The token of each hold this client has, by owner, for `inspect`. The nodes cannot say which node's
   * counter made the token: a node that granted after the verdict may also show M (with a lower index) or
   * more, so only the holder knows its token for sure. Removed on release and abandon.
   */
  const tokens = new Map<string, bigint>()
  /** The node-side owner id of the latest attempt of each acquire still going, for `abandon`. */
  const attempts = new Map<string, string>()
  let attemptSeq = 0
  const refused = (owner: string) => {
    refusals.set(owner, (refusals.get(owner) ?? 0) + 1)
    // Bounded: an acquire that ends without telling us (it cannot) leaves an entry behind.
    if (refusals.size > 4096) refusals.delete(refusals.keys().next().value as string)
  }
  /**
   * The nodes a waiter on `key` listens to: n - q + 1 of them, so at least one is up whenever a majority
   * is (a release publishes on every node); not all n, which would deliver each release n times to each
   * waiting client. Chosen by the key's hash, so the subscriptions of many keys spread over the nodes.
   */
  const listeners = (key: string): RedlockNode[] => {
    const want = n - q + 1
    const start = hash(key) % n
    const ring = [...nodes.slice(start), ...nodes.slice(0, start)]
    const up = ring.filter((node) => node.client.status === 'ready')
    return (up.length >= want ? up : ring).slice(0, want)
  }
  let largestTtl = 0
  const restartDelay = () => options.restartDelayMs ?? largestTtl
  const nodeTimeout = (ttlMs: number) =>
    options.nodeTimeoutMs ?? Math.min(200, Math.max(20, Math.round(ttlMs / 100)))
  /** The timeout of rounds that are not tied to one lease (release, inspect). */
  const defaultTimeout = () => nodeTimeout(largestTtl || 10_000)

  /** Every node's failure in a round (a node that had not answered counts as "no reply yet"). */
  const failures = <T>(votes: Votes<T>): NodeFailure[] =>
    votes.flatMap((v, i) =>
      v === undefined
        ? [{ node: nodes[i]!.id, error: new Error('no reply before the verdict') }]
        : v.ok
          ? []
          : [{ node: nodes[i]!.id, error: v.error }],
    )
  const unreachable = <T>(key: string, what: string, votes: Votes<T>): QuorumError => {
    const list = failures(votes)
    return new QuorumError(
      `Could not ${what} lock "${key}": ${list.length} of the ${n} Redlock nodes failed and a majority (${q}) ` +
        `is needed — ${list.map((f) => `${f.node}: ${(f.error as Error)?.message ?? f.error}`).join('; ')}. ` +
        'Check that these Redis servers are up and reachable',
      list,
      { key, backend: id },
    )
  }

  /**
   * Releases `owner`'s hold (owner-checked) on the given nodes, without waiting: after a failed attempt.
   * Each node's release travels on the same connection after that node's acquire, so it lands after it.
   */
  const releaseOn = (lease: { key: string; owner: string }, which: readonly RedlockNode[] = nodes) => {
    if (which.length === 0) return Promise.resolve()
    const link = linkedAbort()
    const timer = setTimeout(() => link.abort(STOPPED), defaultTimeout() * 5)
    timer.unref()
    const held: HeldLease = { key: lease.key, owner: lease.owner, fence: 0n, cookie: undefined }
    return Promise.allSettled(which.map((node) => node.backend.release(held, link.signal))).finally(() =>
      clearTimeout(timer),
    )
  }

  /** Raises the fence counter to `m` on nodes `behind` until `needed` of them have it; false if they cannot. */
  const writeBack = async (
    key: string,
    m: bigint,
    behind: number[],
    needed: number,
    timeoutMs: number,
    signal: AbortSignal,
  ) => {
    const { verdict } = await round(
      behind.length,
      timeoutMs,
      signal,
      (i, s) => nodes[behind[i]!]!.backend.raiseFence(key, m, s),
      (votes) => {
        const t = tally(votes, () => true)
        if (t.yes >= needed) return true
        if (t.yes + t.pending < needed) return false
        return undefined
      },
    )
    return verdict
  }

  return {
    id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },

    async tryAcquire(request, signal): Promise<AttemptResult> {
      if (request.ttlMs > largestTtl) largestTtl = request.ttlMs
      const timeoutMs = nodeTimeout(request.ttlMs)
      const delay = restartDelay()
      // This attempt's own owner id on the nodes (see the top of this file).
      const req = { ...request, owner: `${request.owner}.${(++attemptSeq).toString(36)}` }
      attempts.delete(request.owner)
      attempts.set(request.owner, req.owner)
      if (attempts.size > 4096) attempts.delete(attempts.keys().next().value as string)
      const { verdict, votes } = await round(
        n,
        timeoutMs,
        signal,
        (i, s) => {
          const node = nodes[i]!
          if (node.votes(delay)) return node.backend.tryAcquire(req, s)
          // A node that becomes ready after the verdict gets nothing: its acquire would follow the clean-up
          // sent at the verdict and leave a hold that blocks the node until its ttl.
          return node.ready(delay, s).then(() => {
            if (s.aborted) throw s.reason
            return node.backend.tryAcquire(req, s)
          })
        },
        (v) =>
          majorityVerdict(
            tally(v, (r) => r.granted),
            n,
            q,
          ),
        // Pending acquires stop at the verdict: not sent yet, or to be re-sent after NOSCRIPT, they would
        // land after the clean-up (below) and hold the node for a ttl. Sent ones are cleaned up.
        true,
      )
      if (verdict !== 'yes') {
        refused(request.owner)
        // Take back what this attempt got, now, on every node that may hold it: those that granted, those
        // that failed (the script may have run after their time was up) and those still pending. Sent now,
        // each release follows its node's acquire on the same connection and precedes the next attempt's:
        // a release sent later, when a slow node's grant arrives, could land after the next attempt (same
        // owner) was granted there, and delete the hold that attempt counts on (two holders). Nodes that
        // refused hold nothing of ours.
        void releaseOn(
          req,
          nodes.filter((_, i) => !(votes[i]?.ok && !votes[i].value.granted)),
        )
      }
      if (verdict === 'yes') {
        // The token: the largest counter of the granting majority (see the top of this file).
        let m = -1n
        for (const v of votes) if (v?.ok && v.value.granted && v.value.fence > m) m = v.value.fence
        const atM: number[] = []
        const behind: number[] = []
        votes.forEach((v, i) => {
          if (v?.ok && v.value.granted) (v.value.fence === m ? atM : behind).push(i)
        })
        const needed = q - atM.length
        if (
          needed <= 0 ||
          (await writeBack(req.key, m, behind, needed, timeoutMs, signal).catch(() => false))
        ) {
          refusals.delete(request.owner)
          attempts.delete(request.owner)
          const fence = (m << NODE_BITS) | BigInt(atM[0]!)
          tokens.set(request.owner, fence)
          // Bounded like `refusals`: a hold whose release never reaches us must not pile up.
          if (tokens.size > 4096) tokens.delete(tokens.keys().next().value as string)
          return { granted: true, fence, ttlMs: req.ttlMs, cookie: req.owner }
        }
        void releaseOn(req)
        throw new QuorumError(
          `Could not record the fence of lock "${req.key}" on a majority of the Redlock nodes (${id}); released it. ` +
            'Check that these Redis servers are up and reachable',
          [],
          { key: req.key, backend: id },
        )
      }
      if (verdict === 'unreachable') throw unreachable(req.key, 'acquire', votes)
      if (verdict === 'no') {
        // Held on a majority: it frees up when all but q-1 of those holds have expired.
        const pttls: number[] = []
        for (const v of votes) {
          if (v?.ok && !v.value.granted && v.value.retryInMs !== undefined) pttls.push(v.value.retryInMs)
        }
        pttls.sort((a, b) => a - b)
        const at = pttls[pttls.length - q]
        return at === undefined ? { granted: false } : { granted: false, retryInMs: at }
      }
      // Split votes: contenders took a minority each (or a node is down among them). Everyone released what
      // it got; retry after a short random delay, as the spec says, so one of them gets ahead.
      return { granted: false, retryInMs: Math.random() * 3 }
    },

    async extend(handle, ttlMs, signal): Promise<ExtendResult> {
      if (ttlMs > largestTtl) largestTtl = ttlMs
      const lease = onNodes(handle)
      const delay = restartDelay()
      const { verdict, votes } = await round(
        n,
        nodeTimeout(ttlMs),
        signal,
        (i, s) => {
          const node = nodes[i]!
          if (node.votes(delay)) return node.backend.extend(lease, ttlMs, s)
          return node.ready(delay, s).then(() => node.backend.extend(lease, ttlMs, s))
        },
        (v) =>
          majorityVerdict(
            tally(v, (r) => r.renewed),
            n,
            q,
          ),
      )
      if (verdict === 'yes') return { renewed: true }
      const t = tally(votes, (r) => r.renewed)
      // Lost once so many nodes say "not ours" that no majority can hold it; anything else is unknown.
      if (t.no > n - q) return { renewed: false }
      throw unreachable(lease.key, 'extend', votes)
    },

    async release(handle, signal) {
      tokens.delete(handle.owner)
      const lease = onNodes(handle)
      const { votes } = await round(
        n,
        defaultTimeout(),
        signal,
        (i, s) => {
          // Waits for the connection (and checks a reconnected server) but never keeps a release from a node,
          // admitted or not.
          const node = nodes[i]!
          if (node.isChecked) return node.backend.release(lease, s)
          return node.checked(s).then(() => node.backend.release(lease, s))
        },
        // Every node gets the release at once; the answer is known when a majority says it was released
        // (the rest go on in the background, like the floor's), or when everyone has answered.
        (v) => (tally(v, (released) => released).yes >= q || !v.includes(undefined) ? true : undefined),
      )
      const t = tally(votes, (released) => released)
      if (t.yes >= q) return true
      // No longer ours on so many nodes that it no longer held a majority: it had been lost.
      if (t.no > n - q) return false
      // Most nodes never got the release: it lingers there until its ttl, which the caller should hear of.
      if (t.failed > n - q) throw unreachable(lease.key, 'release', votes)
      // A majority answered, the nodes in the middle of a change (some paused during the acquire, some now):
      // released wherever it was ours, and a node that missed it gets it when it answers again (same
      // connection) or lets it expire.
      return t.yes > 0
    },

    async abandon(request, signal) {
      refusals.delete(request.owner)
      tokens.delete(request.owner)
      const owner = attempts.get(request.owner)
      if (owner === undefined) return
      attempts.delete(request.owner)
      const req = { ...request, owner }
      await Promise.allSettled(nodes.map((node) => node.backend.abandon?.(req, signal)))
      await releaseOn(req)
    },

    async inspect(key, signal): Promise<LockInfo | null> {
      const { votes } = await round(
        n,
        defaultTimeout(),
        signal,
        (i, s) => nodes[i]!.checked(s).then(() => nodes[i]!.backend.inspect(key, s)),
        (v) => (v.includes(undefined) ? undefined : true),
      )
      const t = tally(votes, () => true)
      if (t.failed > n - q) throw unreachable(key, 'inspect', votes)
      const infos = votes.map((v) => (v?.ok ? v.value : undefined))
      // By the owner id on the nodes (one attempt's hold); reported as the acquire's owner id.
      const byOwner = new Map<string, number[]>()
      infos.forEach((info, i) => {
        if (info?.held && info.owner !== undefined)
          byOwner.set(info.owner, [...(byOwner.get(info.owner) ?? []), i])
      })
      const fenceOf = (among: number[]) => {
        let m = -1n
        let at = -1
        for (const i of among) {
          const f = infos[i]?.fence
          if (f !== undefined && f > m) {
            m = f
            at = i
          }
        }
        return at < 0 ? undefined : (m << NODE_BITS) | BigInt(at)
      }
      for (const [onNode, held] of byOwner) {
        if (held.length < q) continue
        const owner = acquireOwner(onNode)
        // Valid while a majority holds it: until the q-th longest remaining lease ends.
        const remaining = held.map((i) => infos[i]!.expiresInMs ?? 0).sort((a, b) => b - a)
        const fence = tokens.get(owner) ?? fenceOf(held)
        const holder = held.map((i) => infos[i]!.holder).find((h) => h !== undefined)
        return {
          held: true,
          owner,
          ...(holder === undefined ? {} : { holder }),
          ...(fence === undefined ? {} : { fence }),
          expiresInMs: remaining[q - 1]!,
          ...(held.length < n ? { note: `held on ${held.length} of ${n} nodes` } : {}),
        }
      }
      const fence = fenceOf(infos.flatMap((info, i) => (info ? [i] : [])))
      const partial = [...byOwner]
        .map(([owner, held]) => `${acquireOwner(owner)} on ${held.length}`)
        .join(', ')
      if (fence === undefined && !partial) return null
      return {
        held: false,
        ...(fence === undefined ? {} : { fence }),
        ...(partial ? { note: `held without a majority (${partial} of ${n} nodes)` } : {}),
      }
    },

    waitForChange(req, signal) {
      // A release publishes "-<owner>" on every node: the first copy wakes the waiter, and the copies from
      // the other nodes, a moment later, are the same news (without this, each would wake a fresh attempt
      // and a herd of attempts would follow every release). A node whose connection is down wakes its
      // waiter at once (its SUBSCRIBE failed): that is no news either, and would make waiting spin.
      const link = linkedAbort(signal)
      return new Promise<undefined>((resolve) => {
        const done = () => resolve(undefined)
        link.signal.addEventListener('abort', done, { once: true })
        const listen = (node: RedlockNode) => {
          node.backend.waitForMessage(req, link.signal).then(
            (message) => {
              if (link.signal.aborted || node.client.status !== 'ready') return
              if (message && heard.repeats(req.key, message)) listen(node)
              else if ((refusals.get(req.owner) ?? 0) >= 2) setTimeout(done, Math.random() * SPREAD_MS)
              else done()
            },
            () => {},
          )
        }
        for (const node of listeners(req.key)) listen(node)
      }).finally(() => {
        link.abort(STOPPED)
        link.dispose()
      })
    },

    async doctor(signal) {
      const findings: DoctorFinding[] = []
      if (n < 3 || n % 2 === 0) {
        findings.push({
          level: 'warn',
          message: `${n} node${n === 1 ? '' : 's'}: a majority is ${q}, so ${n - q} may fail. Use an odd number, at least 3`,
        })
      } else findings.push({ level: 'ok', message: `${n} nodes: a majority is ${q}, ${n - q} may fail` })
      const each = await Promise.allSettled(
        nodes.map(async (node) => {
          // The URL's clients connect in the background and never queue a command (enableOfflineQueue:
          // false): a check sent before the connection is up fails with "Stream isn't writeable". So wait
          // for it (a node that cannot be reached says why at its first connection error).
          await node.reachable(signal)
          await node.checked(signal)
          // Checking the connection starts the node's catch-up if it needs one: report how it ended.
          await node.settled(signal).catch(() => {})
          return [...(await node.backend.doctor!(signal)), admissionFinding(node)]
        }),
      )
      let admitted = 0
      each.forEach((r, i) => {
        const node = nodes[i]!.id
        if (r.status === 'rejected') {
          findings.push({ level: 'error', message: `${node}: ${(r.reason as Error)?.message ?? r.reason}` })
        } else for (const f of r.value) findings.push({ level: f.level, message: `${node}: ${f.message}` })
        if (nodes[i]!.admission.state === 'admitted') admitted++
      })
      findings.push(
        admitted >= q
          ? { level: 'ok', message: `${admitted} of ${n} nodes admitted: a majority (${q}) can vote` }
          : {
              level: 'error',
              message:
                `only ${admitted} of ${n} nodes admitted (a majority is ${q}): no lock can be granted until ` +
                'more are (see each node above)',
            },
      )
      const delay = restartDelay()
      findings.push({
        level: 'info',
        message:
          options.restartDelayMs === undefined
            ? 'restartDelay is not set, so it is the largest ttl this client has used' +
              (largestTtl > 0 ? ` (${Math.ceil(largestTtl / 1000)} s so far)` : ' (none yet)') +
              ': a node counts toward a quorum once it has been up that long. Set restartDelay to the ' +
              'largest ttl any client uses on these nodes, so that every client waits as long'
            : delay > 0
              ? `a node counts toward a quorum once it has been up for ${Math.ceil(delay / 1000)} s (restartDelay)`
              : 'restartDelay is 0: safe only if every node persists each write (appendfsync always)',
      })
      return findings
    },

    async close() {
      for (const node of nodes) node.dispose()
      await Promise.allSettled(nodes.map((node) => node.backend.close()))
      for (const c of owned) c.disconnect()
    },
  }
}

/** The URL parameters of redlock:// (the README's table is tested against this). */
export const PARAMS = {
  prefix: { type: 'string', doc: 'prefix of every key on every node (default fencelock:)' },
  nodeTimeout: {
    type: 'duration',
    min: 1,
    doc: "how long one node's reply may take before it counts as failed",
  },
  restartDelay: {
    type: 'duration',
    min: 0,
    doc: 'how long a restarted node sits out before it votes again (default: the longest ttl in use)',
  },
} as const satisfies ParamSchema

/**
 * `redlock://[user:password@]host1:port1,host2:port2,host3:port3[?prefix=app:&nodeTimeout=50ms&restartDelay=30s]`
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const ioredis = await loadDriver('ioredis', 'redlock', url, () => import('ioredis'))
  const params = readParams(url, PARAMS)
  if (url.pathname !== '' && url.pathname !== '/') {
    throw new TypeError(
      `Expected no path in ${redact(url)}: Redlock uses database 0 on every node; use ?prefix= to keep applications apart`,
    )
  }
  const hosts = hostsOf(url)
  if (new Set(hosts).size !== hosts.length) {
    throw new TypeError(
      `Expected distinct nodes in ${redact(url)}: a node listed twice would count twice toward a majority`,
    )
  }
  const clients = hosts.map((host) => {
    const parsed = new URL(`redis://${host}`)
    const options: RedisOptions = {
      host: parsed.hostname.replace(/^\[|\]$/g, '') || '127.0.0.1',
      port: parsed.port === '' ? 6379 : Number(parsed.port),
      // A down node fails at once instead of queueing commands that would run much later.
      enableOfflineQueue: false,
      // A command resent after a reconnect might reach a restarted server before it is checked.
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 1,
      connectTimeout: 5000,
      ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
      ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
    }
    const client = new ioredis.Redis(options)
    client.on('error', () => {})
    return client
  })
  try {
    return createRedlockBackend(
      {
        clients,
        prefix: params.prefix,
        nodeTimeoutMs: params.nodeTimeout,
        restartDelayMs: params.restartDelay,
        id: redact(url),
      },
      clients,
    )
  } catch (error) {
    for (const c of clients) c.disconnect()
    throw error
  }
}

/**
 * The releases a client's waiters have already reacted to, per key, for a short while: the copies of one
 * release arriving from the other nodes are then recognised as the same news. Bounded: old keys go first.
 */
class RecentReleases {
  readonly #seen = new Map<string, { message: string; at: number }>()
  constructor(readonly windowMs: () => number) {}

  /** True if `message` on `key` was heard within the window; otherwise records it and returns false. */
  repeats(key: string, message: string): boolean {
    const last = this.#seen.get(key)
    const t = now()
    if (last && last.message === message && t - last.at < this.windowMs()) return true
    this.#seen.delete(key)
    this.#seen.set(key, { message, at: t })
    if (this.#seen.size > 1024) this.#seen.delete(this.#seen.keys().next().value as string)
    return false
  }
}
