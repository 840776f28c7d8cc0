/**
 * The quorum engine (src/engines/quorum/engine.ts) against in-memory fake nodes: no Redis, no network. Each fake
 * node is a map of holds, fence counters and a waiting line (as Redlock's LINE_* scripts keep it) that
 * answers asynchronously, and can fail, hang until its operation is stopped, refuse a fence write-back, or
 * hold back the clean-ups sent to it.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import type { AcquireRequest, HeldLease, LockInfo } from '../../../src/core/backend.js'
import type { NodeRequest, QuorumAdapter } from '../../../src/engines/quorum/adapter.js'
import { Quorum } from '../../../src/engines/quorum/engine.js'
import { inspectVotes } from '../../../src/engines/quorum/inspect.js'
import { type ReleaseListener, ReleaseWaiting } from '../../../src/engines/quorum/wait.js'
import { createLockClient, type LockBackend, QuorumError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { waitUntil } from '../../support/wait.js'

const NODE_BITS = 8n
const OWNER = 'a'.repeat(32)
const signal = () => AbortSignal.timeout(10_000)
const request = (key: string, ttlMs = 10_000): AcquireRequest => ({ key, owner: OWNER, ttlMs })

/** One node: answers, fails every operation, or hangs until the operation's signal aborts. */
type Mode = 'answer' | 'fail' | 'hang'

class FakeNode implements QuorumAdapter, ReleaseListener {
  readonly holds = new Map<string, { owner: string; until: number }>()
  readonly counters = new Map<string, bigint>()
  /** The waiting line of each key: waiter id -> its ticket and liveness deadline (monotonic ms). */
  readonly lines = new Map<string, Map<string, { ticket: number; until: number }>>()
  /** Every operation that reached the node, as "<op> <owner or key>". */
  readonly log: string[] = []
  /** The reasons of the hanging operations that were stopped. */
  readonly stopped: unknown[] = []
  /** When each operation reached the node (monotonic ms). */
  readonly reachedAt: number[] = []
  mode: Mode = 'answer'
  /** How long each answer takes (the operation is applied whether or not its caller still waits). */
  delayMs = 0
  raiseFails = false
  /** Clean-ups wait for this before they land (a command re-sent a round trip late). */
  cleanUpGate: Promise<void> | undefined
  up = true
  readonly #listeners = new Set<(message: string) => void>()

  constructor(readonly id: string) {}

  hold(key: string, owner: string, ms: number): void {
    this.holds.set(key, { owner, until: performance.now() + ms })
  }

  holderOf(key: string): string | undefined {
    const h = this.holds.get(key)
    return h && h.until > performance.now() ? h.owner : undefined
  }

  announce(message: string): void {
    for (const l of this.#listeners) l(message)
  }

  /** The first live waiter in `key`'s line (dropping dead ones), as LINE_ACQUIRE finds it. */
  first(key: string): string | undefined {
    const line = this.lines.get(key)
    if (!line) return undefined
    for (const [waiter, place] of line) if (place.until <= performance.now()) line.delete(waiter)
    const order = [...line].sort(([a, x], [b, y]) => x.ticket - y.ticket || (a < b ? -1 : a > b ? 1 : 0))
    return order[0]?.[0]
  }

  acquire(req: NodeRequest, s: AbortSignal) {
    return this.#reply(`acquire ${req.owner}`, s, () => {
      const owner = this.holderOf(req.key)
      const now = performance.now()
      if (
        owner === req.owner ||
        (owner === undefined && [undefined, req.waiter].includes(this.first(req.key)))
      ) {
        this.holds.set(req.key, { owner: req.owner, until: now + req.ttlMs })
        const fence = (this.counters.get(req.key) ?? 0n) + 1n
        this.counters.set(req.key, fence)
        return { granted: true as const, fence }
      }
      const line = this.lines.get(req.key) ?? new Map<string, { ticket: number; until: number }>()
      this.lines.set(req.key, line)
      const last = Math.max(0, ...[...line.values()].map((p) => p.ticket))
      const ticket = req.ticket || line.get(req.waiter)?.ticket || last + 1
      line.set(req.waiter, { ticket, until: now + req.livenessMs })
      const h = this.holds.get(req.key)
      const retryInMs = h && owner !== undefined ? h.until - now : line.get(this.first(req.key)!)!.until - now
      return { granted: false as const, retryInMs, ticket }
    })
  }

  raiseFence(key: string, _owner: string, atLeast: bigint, s: AbortSignal) {
    return this.#reply(`raise ${key} ${atLeast}`, s, () => {
      if (this.raiseFails) throw new Error(`${this.id}: out of memory`)
      const value = (this.counters.get(key) ?? 0n) > atLeast ? this.counters.get(key)! : atLeast
      this.counters.set(key, value)
      return value
    })
  }

  extend(lease: HeldLease, ttlMs: number, s: AbortSignal) {
    return this.#reply(`extend ${lease.owner}`, s, () => {
      if (this.holderOf(lease.key) !== lease.owner) return { renewed: false }
      this.hold(lease.key, lease.owner, ttlMs)
      return { renewed: true }
    })
  }

  release(lease: HeldLease, s: AbortSignal) {
    return this.#reply(`release ${lease.owner}`, s, () => {
      this.lines.get(lease.key)?.delete(lease.owner.split('.')[0]!)
      return this.#drop(lease)
    })
  }

  async cleanUp(lease: HeldLease, s: AbortSignal) {
    await this.cleanUpGate
    return this.#reply(`cleanUp ${lease.owner}`, s, () => this.#drop(lease))
  }

  abandon(req: NodeRequest, s: AbortSignal) {
    return this.#reply(`abandon ${req.owner}`, s, () => {
      this.lines.get(req.key)?.delete(req.waiter)
    })
  }

  inspect(key: string, s: AbortSignal) {
    return this.#reply(`inspect ${key}`, s, (): LockInfo | null => {
      const owner = this.holderOf(key)
      const fence = this.counters.get(key)
      if (owner === undefined) return fence === undefined ? null : { held: false, fence }
      return { held: true, owner, fence, expiresInMs: this.holds.get(key)!.until - performance.now() }
    })
  }

  listen(_req: AcquireRequest, s: AbortSignal): Promise<string | undefined> {
    this.log.push('listen')
    return new Promise((resolve) => {
      const heard = (message: string) => {
        this.#listeners.delete(heard)
        resolve(message)
      }
      this.#listeners.add(heard)
      s.addEventListener('abort', () => {
        this.#listeners.delete(heard)
        resolve(undefined)
      })
    })
  }

  #drop(lease: HeldLease): boolean {
    if (this.holderOf(lease.key) !== lease.owner) return false
    this.holds.delete(lease.key)
    return true
  }

  async #reply<T>(what: string, s: AbortSignal, apply: () => T): Promise<T> {
    this.log.push(what)
    this.reachedAt.push(performance.now())
    await Promise.resolve() // never synchronously, like any reply from a network
    if (this.mode === 'fail') throw new Error(`${this.id}: connection refused`)
    if (this.mode === 'hang') {
      return new Promise<T>((_, reject) => {
        const stop = () => {
          this.stopped.push(s.reason)
          reject(s.reason)
        }
        if (s.aborted) stop()
        else s.addEventListener('abort', stop, { once: true })
      })
    }
    if (this.delayMs > 0) await delay(this.delayMs)
    return apply()
  }
}

/** `count` fake nodes, with key `k`'s fence counter at `counters[i]` on node i when given. */
function fakeQuorum(count: number, nodeTimeoutMs = 10_000, counters: readonly bigint[] = []) {
  const nodes = Array.from({ length: count }, (_, i) => new FakeNode(`node${i}`))
  counters.forEach((value, i) => {
    nodes[i]!.counters.set('k', value)
  })
  return { nodes, quorum: new Quorum(nodes, { id: 'fake://quorum', nodeTimeoutMs }) }
}

/** The owner ids the nodes were asked to acquire for, in order of the attempts. */
const attemptOwners = (node: FakeNode) =>
  node.log.filter((l) => l.startsWith('acquire ')).map((l) => l.slice('acquire '.length))

describe('quorum engine: acquire', () => {
  it('grants on a majority although the others fail: the token is the largest counter, with its node index', async () => {
    const { nodes, quorum } = fakeQuorum(5, 10_000, [3n, 7n, 5n, 0n, 0n])
    nodes[3]!.mode = 'fail'
    nodes[4]!.mode = 'fail'
    const grant = await quorum.tryAcquire(request('k'), signal())
    assert.ok(grant.granted)
    // Nodes 0-2 minted 4, 8 and 6: M = 8, minted by node 1.
    assert.equal(grant.fence, (8n << NODE_BITS) | 1n)
    // The grant reports the ttl asked for, never more: the core counts it from before the first request.
    assert.equal(grant.ttlMs, 10_000)
    // Held on every node that granted, under this attempt's own owner id (the grant's cookie).
    assert.match(String(grant.cookie), new RegExp(`^${OWNER}\\.[0-9a-z]+$`))
    for (const node of nodes.slice(0, 3)) assert.equal(node.holderOf('k'), grant.cookie)
  })

  it('writes M back to the nodes of the majority that were behind, and only as many as a majority needs', async () => {
    const { nodes, quorum } = fakeQuorum(5, 10_000, [3n, 7n, 5n, 1n, 0n])
    nodes[4]!.mode = 'fail'
    // Granting: 0-3 mint 4, 8, 6, 2. M = 8 on node 1 only; two of the three behind make a majority with it.
    const grant = await quorum.tryAcquire(request('k'), signal())
    assert.ok(grant.granted)
    assert.equal(grant.fence >> NODE_BITS, 8n)
    const raised = nodes.filter((node) => node.counters.get('k') === 8n)
    assert.ok(raised.length >= 3, `M is on ${raised.length} nodes: ${nodes.map((n) => n.counters.get('k'))}`)
    assert.equal(
      nodes[1]!.log.filter((l) => l.startsWith('raise')).length,
      0,
      'the minting node is not raised',
    )
  })

  it('writes nothing back when the majority is in step (one round trip)', async () => {
    const { nodes, quorum } = fakeQuorum(3)
    for (const node of nodes) node.counters.set('k', 41n)
    const grant = await quorum.tryAcquire(request('k'), signal())
    assert.ok(grant.granted)
    assert.equal(grant.fence >> NODE_BITS, 42n)
    for (const node of nodes)
      assert.deepEqual(
        node.log.filter((l) => l.startsWith('raise')),
        [],
      )
  })

  it('raises, without waiting, the nodes a grant left behind although its majority needed none of them', async () => {
    // A node's counter serves every name: a node left behind would make later grants write back.
    const { nodes, quorum } = fakeQuorum(3, 10_000, [9n, 9n, 2n])
    nodes[2]!.delayMs = 50
    const grant = await quorum.tryAcquire(request('k'), signal())
    assert.ok(grant.granted)
    assert.equal(grant.fence >> NODE_BITS, 10n)
    // Node 2 minted 3, in the round or after it: either way it is raised to M.
    await waitUntil(() => nodes[2]!.counters.get('k') === 10n, 'node 2 raised to M')
  })

  it('a grant whose token cannot be written back is released everywhere and reported as a QuorumError', async () => {
    const { nodes, quorum } = fakeQuorum(3)
    nodes[0]!.counters.set('k', 10n)
    nodes[1]!.raiseFails = true
    nodes[2]!.raiseFails = true
    await assert.rejects(quorum.tryAcquire(request('k'), signal()), (e: unknown) => {
      assert.ok(e instanceof QuorumError)
      assert.match(e.message, /Could not record the fence of lock "k"/)
      return true
    })
    await delay(10)
    for (const node of nodes) assert.equal(node.holderOf('k'), undefined, `${node.id} still holds it`)
  })

  it("an election's quorum speaks of the leadership of the election in its errors, not of a lock", async () => {
    const nodes = Array.from({ length: 3 }, (_, i) => new FakeNode(`node${i}`))
    const quorum = new Quorum(nodes, { id: 'fake://quorum', primitive: 'election', nodeTimeoutMs: 10_000 })
    for (const node of nodes) node.mode = 'fail'
    await assert.rejects(quorum.tryAcquire(request('k'), signal()), (e: unknown) => {
      assert.ok(e instanceof QuorumError)
      assert.match(e.message, /^Could not acquire leadership of election "k": 3 of 3 Redlock nodes failed/)
      return true
    })
    for (const node of nodes) node.mode = 'answer'
    nodes[0]!.counters.set('k', 10n)
    nodes[1]!.raiseFails = true
    nodes[2]!.raiseFails = true
    await assert.rejects(quorum.tryAcquire(request('k'), signal()), (e: unknown) => {
      assert.ok(e instanceof QuorumError)
      assert.match(e.message, /^Could not record the fence of leadership of election "k" on a majority/)
      return true
    })
  })

  it('refused by a majority: not acquired, the time until a majority frees up, and only nodes that may hold it are cleaned up', async () => {
    const { nodes, quorum } = fakeQuorum(5)
    nodes[0]!.hold('k', 'other', 3000)
    nodes[1]!.hold('k', 'other', 1000)
    nodes[2]!.hold('k', 'other', 2000)
    const result = await quorum.tryAcquire(request('k'), signal())
    assert.equal(result.granted, false)
    // Free once all but q-1 = 2 of the three holds have ended: after the shortest one.
    assert.ok(!result.granted && result.retryInMs !== undefined)
    assert.ok(result.retryInMs > 900 && result.retryInMs <= 1000, `retryInMs ${result.retryInMs}`)
    await delay(10)
    // Nodes 3 and 4 had granted this attempt: their holds are taken back. The refusing nodes get nothing.
    for (const node of nodes.slice(3)) {
      assert.equal(node.holderOf('k'), undefined)
      assert.equal(node.log.filter((l) => l.startsWith('cleanUp')).length, 1)
    }
    for (const node of nodes.slice(0, 3)) {
      assert.equal(node.holderOf('k'), 'other')
      assert.deepEqual(
        node.log.filter((l) => l.startsWith('cleanUp')),
        [],
      )
    }
  })

  it('too many failures to form a majority is a QuorumError naming each failed node; refusals are not', async () => {
    const { nodes, quorum } = fakeQuorum(5)
    for (const node of nodes.slice(2)) node.mode = 'fail'
    const error = await quorum.tryAcquire(request('k'), signal()).then(
      () => assert.fail('granted with 3 of 5 nodes down'),
      (e: unknown) => e,
    )
    assert.ok(error instanceof QuorumError, `expected a QuorumError, got ${error}`)
    assert.deepEqual(
      error.failures.map((f) => f.node),
      ['node2', 'node3', 'node4'],
    )
    for (const f of error.failures) assert.match((f.error as Error).message, /connection refused/)
    assert.match(error.message, /3 of 5 Redlock nodes failed, a majority \(3\) is needed/)
    // Two down and three held by someone else: simply not acquired.
    const other = fakeQuorum(5)
    for (const node of other.nodes.slice(0, 2)) node.mode = 'fail'
    for (const node of other.nodes.slice(2)) node.hold('k', 'other', 5000)
    assert.equal((await other.quorum.tryAcquire(request('k'), signal())).granted, false)
  })

  it('a split vote is not acquired, retries after a short random delay, and cleans up failed nodes too', async () => {
    const { nodes, quorum } = fakeQuorum(5)
    nodes[0]!.mode = 'fail'
    nodes[1]!.mode = 'fail'
    nodes[2]!.hold('k', 'other', 5000)
    nodes[3]!.hold('k', 'other', 5000)
    const result = await quorum.tryAcquire(request('k'), signal())
    assert.ok(!result.granted && result.retryInMs !== undefined && result.retryInMs < 3)
    await delay(10)
    assert.equal(nodes[4]!.holderOf('k'), undefined, 'the minority hold was not taken back')
    // A failed node may have run the acquire after its time was up: it gets the clean-up as well.
    for (const node of nodes.slice(0, 2))
      assert.equal(node.log.filter((l) => l.startsWith('cleanUp')).length, 1)
  })

  it('stops the acquires still pending when the round is won; a lost round takes back what they grant, once they answer', async () => {
    const won = fakeQuorum(5)
    won.nodes[3]!.mode = 'hang'
    won.nodes[4]!.mode = 'hang'
    // The node timeout is 10 s: only the verdict can stop them this soon.
    assert.ok((await won.quorum.tryAcquire(request('k'), signal())).granted)
    await delay(10)
    for (const node of won.nodes.slice(3)) {
      assert.equal(node.stopped.length, 1, `${node.id}'s acquire was not stopped`)
      assert.equal((node.stopped[0] as Error).name, 'Verdict')
    }
    // Refused by 0-2 at once; 3 (refusing too) and 4 (granting) answer after the verdict. Only 4 gets a
    // clean-up, once its grant is in: a refusing node holds nothing of ours, so it costs no command.
    const lost = fakeQuorum(5)
    for (const node of lost.nodes.slice(0, 4)) node.hold('k', 'other', 5000)
    for (const node of lost.nodes.slice(3)) node.delayMs = 30
    assert.equal((await lost.quorum.tryAcquire(request('k'), signal())).granted, false)
    const cleanUps = (node: FakeNode) => node.log.filter((l) => l.startsWith('cleanUp')).length
    assert.equal(cleanUps(lost.nodes[4]!), 0, 'cleaned up before its answer was in')
    await waitUntil(
      () => cleanUps(lost.nodes[4]!) === 1 && lost.nodes[4]!.holderOf('k') === undefined,
      "node 4's late grant taken back",
    )
    assert.equal(lost.nodes[4]!.stopped.length, 0)
    assert.deepEqual(lost.nodes.slice(0, 4).map(cleanUps), [0, 0, 0, 0])
  })

  it("each attempt has its own owner id: a failed attempt's late clean-up never undoes the next attempt", async () => {
    // Attempt 1 is refused by 0-2 and granted on 3 and 4, whose clean-ups land late (after attempt 2).
    // Attempt 2 starts with node 0 free. Had it the same owner id as attempt 1, nodes 3 and 4 would count it
    // as "already ours" (a majority with node 0), and the late clean-ups would then delete those holds.
    const { nodes, quorum } = fakeQuorum(5)
    for (const node of nodes.slice(0, 3)) node.hold('k', 'other', 5000)
    let land = () => {}
    const late = new Promise<void>((resolve) => {
      land = resolve
    })
    for (const node of nodes.slice(3)) node.cleanUpGate = late
    assert.equal((await quorum.tryAcquire(request('k'), signal())).granted, false)
    nodes[0]!.holds.delete('k')
    const second = await quorum.tryAcquire(request('k'), signal())
    land()
    await delay(10)
    const [first, next] = attemptOwners(nodes[3]!)
    assert.notEqual(first, next)
    const holding = nodes.filter((node) => node.holderOf('k')?.startsWith(OWNER)).length
    if (second.granted) assert.ok(holding >= 3, `granted, but held on ${holding} of 5 nodes`)
  })

  it('abandon removes what the latest attempt may hold, on every node', async () => {
    const { nodes, quorum } = fakeQuorum(3)
    nodes[1]!.hold('k', 'other', 5000)
    nodes[2]!.mode = 'hang'
    // Node 0 grants, node 1 refuses, node 2 never answers: no verdict yet when the caller gives up.
    const giveUp = new AbortController()
    const attempt = awaitLater(quorum.tryAcquire(request('k'), giveUp.signal))
    await delay(10)
    giveUp.abort(new Error('gave up'))
    await assert.rejects(attempt, /gave up/)
    assert.ok(nodes[0]!.holderOf('k')?.startsWith(OWNER), 'node 0 should hold the attempt')
    nodes[2]!.mode = 'answer'
    await quorum.abandon(request('k'), signal())
    assert.equal(nodes[0]!.holderOf('k'), undefined)
    assert.equal(nodes[1]!.holderOf('k'), 'other')
    for (const node of nodes) assert.ok(node.log.includes(`abandon ${attemptOwners(nodes[0]!)[0]}`))
  })
})

describe('quorum engine: the waiting line', () => {
  const waiter = (c: string, key = 'k'): AcquireRequest => ({ key, owner: c.repeat(32), ttlMs: 10_000 })

  it('tickets by arrival; a free lock goes to the first in line, not to whoever asks first', async () => {
    const { nodes, quorum } = fakeQuorum(5)
    for (const node of nodes) node.hold('k', 'holder.1', 5000)
    const first = await quorum.tryAcquire(waiter('a'), signal())
    const second = await quorum.tryAcquire(waiter('b'), signal())
    // Refused everywhere, in line: the core then waits for its turn instead of polling.
    assert.ok(!first.granted && first.queued && !second.granted && second.queued)
    for (const node of nodes) {
      const line = node.lines.get('k')!
      assert.ok(line.get('a'.repeat(32))!.ticket < line.get('b'.repeat(32))!.ticket)
    }
    for (const node of nodes) node.holds.delete('k')
    // b asks first once the lock is free: a stands before it on every node, so b is refused everywhere
    // (no split, nothing to clean up), and a takes every node.
    const barging = await quorum.tryAcquire(waiter('b'), signal())
    assert.ok(!barging.granted && barging.queued)
    for (const node of nodes) assert.equal(node.holderOf('k'), undefined)
    const turn = await quorum.tryAcquire(waiter('a'), signal())
    assert.ok(turn.granted)
    // A newcomer draws a ticket behind b, from the places a majority offered.
    const late = await quorum.tryAcquire(waiter('c'), signal())
    assert.ok(!late.granted)
    assert.ok(
      nodes[0]!.lines.get('k')!.get('c'.repeat(32))!.ticket >
        nodes[0]!.lines.get('k')!.get('b'.repeat(32))!.ticket,
    )
  })

  it('a waiter that missed a node (its attempt failed there) still gets its turn from the others', async () => {
    const { nodes, quorum } = fakeQuorum(5)
    for (const node of nodes) node.hold('k', 'holder.1', 5000)
    nodes[4]!.mode = 'fail'
    assert.equal((await quorum.tryAcquire(waiter('a'), signal())).granted, false)
    nodes[4]!.mode = 'answer'
    assert.equal((await quorum.tryAcquire(waiter('b'), signal())).granted, false)
    for (const node of nodes) node.holds.delete('k')
    // b is first on node 4 (a never stood there), a on 0-3: a takes the majority, b at most node 4.
    assert.ok((await quorum.tryAcquire(waiter('a'), signal())).granted)
    assert.equal((await quorum.tryAcquire(waiter('b'), signal())).granted, false)
  })
})

describe('quorum engine: extend and release', () => {
  const held = async (count: number) => {
    const q = fakeQuorum(count, 100)
    const grant = await q.quorum.tryAcquire(request('k'), signal())
    assert.ok(grant.granted)
    return { ...q, lease: { key: 'k', owner: OWNER, fence: grant.fence, cookie: grant.cookie } }
  }

  it('extend: renewed on a majority; lost once too many nodes say "not ours"; unknown (a throw) otherwise', async () => {
    const { nodes, quorum, lease } = await held(5)
    nodes[0]!.mode = 'fail'
    nodes[1]!.holds.delete('k')
    assert.deepEqual(await quorum.extend(lease, 10_000, signal()), { renewed: true })
    nodes[2]!.holds.delete('k')
    nodes[3]!.holds.delete('k')
    assert.deepEqual(await quorum.extend(lease, 10_000, signal()), { renewed: false })
    const again = await held(5)
    for (const node of again.nodes.slice(0, 3)) node.mode = 'fail'
    await assert.rejects(again.quorum.extend(again.lease, 10_000, signal()), QuorumError)
  })

  it('release: true on a majority, false when it was no longer held, a QuorumError when most nodes failed', async () => {
    const { nodes, quorum, lease } = await held(5)
    nodes[4]!.mode = 'hang'
    assert.equal(await quorum.release(lease, signal()), true)
    for (const node of nodes.slice(0, 4)) assert.equal(node.holderOf('k'), undefined)
    assert.equal(await quorum.release(lease, AbortSignal.timeout(5000)).catch(() => 'threw'), false)
    const again = await held(5)
    for (const node of again.nodes.slice(0, 3)) node.mode = 'fail'
    await assert.rejects(again.quorum.release(again.lease, signal()), QuorumError)
  })
})

describe('quorum engine: validity, through the core', () => {
  /** The engine as a backend, for the core's client. */
  const backendOf = (quorum: Quorum): LockBackend => ({
    id: 'fake://quorum',
    capabilities: { expiry: 'server-ttl', notify: false, fifo: false },
    tryAcquire: (req, s) => quorum.tryAcquire(req, s),
    extend: (lease, ttl, s) => quorum.extend(lease, ttl, s),
    release: (lease, s) => quorum.release(lease, s),
    abandon: (req, s) => quorum.abandon(req, s),
    inspect: (key, s) => quorum.inspect(key, s),
    close: async () => {},
  })

  it('counts validity from before the first node request, less the drift, and releases a grant that comes too late', async () => {
    const { nodes, quorum } = fakeQuorum(3)
    for (const node of nodes) node.delayMs = 30
    const locks = createLockClient(backendOf(quorum), { ttl: 1000, renew: false })
    try {
      const before = performance.now()
      const lock = await locks.acquire('k')
      // The attempt started before any node was asked: validity = start + ttl - (1% + 2 ms), not counted
      // from the replies (30 ms later).
      const firstRequest = Math.min(...nodes.map((node) => node.reachedAt[0]!))
      assert.ok(lock.validUntil <= firstRequest + 1000 - 12, `validUntil ${lock.validUntil - firstRequest}`)
      assert.ok(lock.validUntil >= before + 1000 - 12, `validUntil ${lock.validUntil - before}`)
      await lock.release()
      // Answers slower than the whole ttl: the grant arrives with no validity left, and is taken back.
      for (const node of nodes) node.delayMs = 150
      const late = await createLockClient(backendOf(quorum), { ttl: 100, renew: false }).tryAcquire('late')
      assert.equal(late, null)
      await delay(400)
      for (const node of nodes) assert.equal(node.holderOf('late'), undefined, `${node.id} still holds it`)
    } finally {
      await locks.close()
    }
  })
})

describe('quorum engine: inspect', () => {
  const info = (owner: string, fence: bigint, expiresInMs: number): LockInfo => ({
    held: true,
    owner,
    fence,
    expiresInMs,
  })
  const attempt = `${OWNER}.7`

  it('held on a majority: the acquire owner, valid until the q-th longest lease, a counter or our token', () => {
    const infos = [
      info(attempt, 5n, 900),
      info(attempt, 9n, 300),
      { held: false, fence: 12n },
      info(attempt, 4n, 600),
      undefined,
    ]
    const seen = inspectVotes(infos, 3, () => undefined)
    assert.deepEqual(seen, {
      held: true,
      owner: OWNER,
      fence: (9n << NODE_BITS) | 1n,
      expiresInMs: 300,
      note: 'held on 3 of 5 nodes: a bare majority, so each extend needs every one of them to renew',
    })
    assert.equal(inspectVotes(infos, 3, (o) => (o === OWNER ? 77n : undefined))?.fence, 77n)
  })

  it("held: the counter most holding nodes show, not a late node's larger one; ties go to the larger", () => {
    // Nodes 1 and 2 decided the grant at 5 (node 2 written back); node 0's part landed late and minted 6.
    const late = [info(attempt, 6n, 900), info(attempt, 5n, 900), info(attempt, 5n, 900)]
    assert.equal(inspectVotes(late, 2, () => undefined)?.fence, (5n << NODE_BITS) | 1n)
    // Node 1 silent: one node shows each value, and the larger is the guess.
    const silent = [info(attempt, 6n, 900), undefined, info(attempt, 5n, 900)]
    assert.equal(inspectVotes(silent, 2, () => undefined)?.fence, 6n << NODE_BITS)
  })

  it("an election's value: the one most holding nodes show, not a minority's; a lock shows none", () => {
    const valued = (value: string): LockInfo => ({ ...info(attempt, 5n, 900), value })
    // A proclaim that reached one node only (its outcome unknown), or a node left with a stale value.
    const infos = [valued('new'), valued('old'), valued('old'), undefined, null]
    assert.equal(inspectVotes(infos, 3, () => undefined)?.value, 'old')
    assert.equal(
      inspectVotes([info(attempt, 5n, 900), info(attempt, 5n, 900)], 2, () => undefined)?.value,
      undefined,
    )
  })

  it('held without a majority, or free: not held, with the latest counter; nothing at all: null', () => {
    const infos = [info(attempt, 5n, 900), { held: false, fence: 12n }, null]
    assert.deepEqual(
      inspectVotes(infos, 2, () => undefined),
      {
        held: false,
        fence: (12n << NODE_BITS) | 1n,
        note: `held without a majority (${OWNER} on 1 of 3 nodes)`,
      },
    )
    assert.equal(
      inspectVotes([null, undefined, null], 2, () => undefined),
      null,
    )
  })
})

describe('quorum engine: waiting for a release', () => {
  it('listens to n - q + 1 nodes and wakes at each copy that names the waiter', async () => {
    const { nodes, quorum } = fakeQuorum(5)
    const waiting = new ReleaseWaiting(nodes, quorum.q)
    const stop = new AbortController()
    const woken = awaitLater(waiting.waitForChange(request('k'), stop.signal))
    await delay(5)
    const listening = nodes.filter((node) => node.log.includes('listen'))
    assert.equal(listening.length, 3)
    listening[0]!.announce(OWNER)
    await woken
    // A copy from another node that names it again: the release reached one more node, worth asking again.
    const next = awaitLater(waiting.waitForChange(request('k'), stop.signal))
    await delay(5)
    listening[1]!.announce(OWNER)
    await next
    stop.abort()
  })
})
