/**
 * The quorum engine's node (src/engines/quorum/engine.ts) over one Redis master: one primitive's
 * single-node lock in line (`NodeLock`: the lock's, line.ts; an election's, election/line.ts), each
 * operation gated on what the node needs before it may take part (node.ts): a vote (acquire, extend,
 * proclaim) waits until the node is checked, admitted and old enough; a release or an inspect only until
 * its connection is checked; a clean-up waits for nothing.
 */
import { raceSignal } from '../../core/abort.js'
import type { AcquireRequest, ExtendResult, HeldLease, LockInfo } from '../../core/backend.js'
import type { NodeAttempt, NodeRequest, QuorumAdapter } from '../../engines/quorum/adapter.js'
import type { QuorumElectionAdapter } from '../../engines/quorum/election.js'
import type { ReleaseListener } from '../../engines/quorum/wait.js'
import type { ElectionLine } from './election/line.js'
import type { RedlockNode } from './node.js'

/** One primitive's lock in line on one node, each operation on that node alone, owner-checked. */
export interface NodeLock {
  /** One attempt in line; a refusal carries the waiter's ticket. */
  tryAcquire(req: NodeRequest, signal: AbortSignal): Promise<NodeAttempt>
  extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<ExtendResult>
  /** The holder's release: it leaves the line, and the first waiter left is woken. */
  release(lease: HeldLease, signal: AbortSignal): Promise<boolean>
  /** The clean-up of a lost attempt: its acquire keeps its place in line. */
  cleanUp(lease: { key: string; owner: string }): Promise<boolean>
  /** An acquire that gave up: its latest attempt's hold and its place in line go. */
  abandon(req: NodeRequest, signal: AbortSignal): Promise<void>
  inspect(key: string, signal: AbortSignal): Promise<LockInfo | null>
  /** The write-back of a grant's token (scripts.ts RAISE): the node's counter afterwards. */
  raiseFence(key: string, owner: string, atLeast: bigint): Promise<bigint>
  /** The node's counter (0n before its first grant). */
  counter(): Promise<bigint>
  /** An operator's break of attempt `owner`'s hold, where the primitive has one. */
  breakHold?(key: string, owner: string): Promise<boolean>
}

/** The lock's `NodeLock` on `node`: the Redis backend in line mode, and the mode's own operations. */
export function mutexLock(node: RedlockNode): NodeLock {
  const { backend, line } = node
  return {
    tryAcquire: (req, s) => backend.tryAcquire(req, s),
    extend: (lease, ttlMs, s) => backend.extend(lease, ttlMs, s),
    release: (lease, s) => backend.release(lease, s),
    cleanUp: (lease) => line.cleanUp(lease),
    abandon: (req, s) => backend.abandon(req, s),
    inspect: (key, s) => backend.inspect(key, s),
    raiseFence: (key, owner, atLeast) => line.raiseFence(key, owner, atLeast),
    counter: () => line.counter(),
    breakHold: (key, owner) => line.breakHold(key, owner),
  }
}

export class RedlockAdapter implements QuorumAdapter, ReleaseListener {
  constructor(
    readonly node: RedlockNode,
    /** How long a node must have been up before it votes (restartDelay, read at each vote). */
    readonly restartDelay: () => number,
    /** The primitive this node takes part in. */
    readonly lock: NodeLock,
  ) {}

  get id(): string {
    return this.node.id
  }

  get up(): boolean {
    return this.node.client.status === 'ready'
  }

  /** The backend's attempt in line mode, whose refusals carry the waiter's ticket (line.ts). */
  acquire(req: NodeRequest, s: AbortSignal): Promise<NodeAttempt> {
    const { node } = this
    const delay = this.restartDelay()
    if (node.votes(delay)) return this.lock.tryAcquire(req, s)
    // A node that becomes ready after the verdict gets nothing: its acquire would follow the clean-up sent
    // at the verdict and leave a hold that blocks the node until its ttl.
    return node.ready(delay, s).then(() => {
      if (s.aborted) throw s.reason
      return this.lock.tryAcquire(req, s)
    })
  }

  raiseFence(key: string, owner: string, atLeast: bigint, s: AbortSignal): Promise<bigint> {
    return raceSignal(this.lock.raiseFence(key, owner, atLeast), s)
  }

  extend(lease: HeldLease, ttlMs: number, s: AbortSignal) {
    return this.whenVoting(s, () => this.lock.extend(lease, ttlMs, s))
  }

  /** Runs `op` once this node may vote (at once, in the common case). */
  protected whenVoting<T>(s: AbortSignal, op: () => Promise<T>): Promise<T> {
    const { node } = this
    const delay = this.restartDelay()
    if (node.votes(delay)) return op()
    return node.ready(delay, s).then(op)
  }

  release(lease: HeldLease, s: AbortSignal): Promise<boolean> {
    // Waits for the connection (and checks a reconnected server) but never keeps a release from a node,
    // admitted or not.
    const { node } = this
    if (node.isChecked) return this.lock.release(lease, s)
    return node.checked(s).then(() => this.lock.release(lease, s))
  }

  /** Sent at once, on the connection of the attempt's acquire (never waits for a check). */
  cleanUp(lease: HeldLease, s: AbortSignal): Promise<boolean> {
    return raceSignal(this.lock.cleanUp(lease), s)
  }

  async abandon(req: NodeRequest, s: AbortSignal): Promise<void> {
    await this.lock.abandon(req, s)
  }

  /**
   * The node's hold of `key`, with its fence; for a free key, which keeps nothing once its holds are over,
   * the node's counter: every later grant here mints more (null on a node that never granted).
   */
  async inspect(key: string, s: AbortSignal): Promise<LockInfo | null> {
    await this.node.checked(s)
    const info = await this.lock.inspect(key, s)
    if (info !== null) return info
    const counter = await raceSignal(this.lock.counter(), s)
    return counter > 0n ? { held: false, fence: counter } : null
  }

  /** Waits for the connection's check, as a release does: an operator's break reaches every node it can. */
  breakHold(key: string, owner: string, s: AbortSignal): Promise<boolean> {
    const { breakHold } = this.lock
    if (!breakHold) return Promise.reject(new TypeError(`${this.id}: this primitive has no operator's break`))
    return this.node.checked(s).then(() => raceSignal(breakHold.call(this.lock, key, owner), s))
  }

  listen(req: AcquireRequest, s: AbortSignal): Promise<string | undefined> {
    return this.node.backend.waitForMessage(req, s)
  }
}

/** A node of the quorum election: the adapter over the node's `ElectionLine`, with proclaim and watch. */
export class RedlockElectionAdapter extends RedlockAdapter implements QuorumElectionAdapter {
  constructor(
    node: RedlockNode,
    restartDelay: () => number,
    readonly election: ElectionLine,
  ) {
    super(node, restartDelay, election)
  }

  /** A vote, as an extend: a node that may not vote yet fails (it must not say "not the leader"). */
  proclaim(lease: HeldLease, value: string, s: AbortSignal): Promise<boolean> {
    return this.whenVoting(s, () => this.election.proclaim(lease, value, s))
  }

  /** The node's own Redis election watches the `changed` channel the election scripts publish to. */
  watch(key: string, s: AbortSignal): Promise<void> {
    return this.node.backend.election.watch(key, s)
  }
}
