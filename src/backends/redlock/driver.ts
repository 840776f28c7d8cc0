/**
 * The quorum engine's node (src/engines/quorum.ts) over one Redis master: the single-node Redis backend's
 * primitives, each gated on what the node needs before it may take part (node.ts): a vote (acquire,
 * extend) waits until the node is checked, admitted and old enough; a release or an inspect only until its
 * connection is checked; a clean-up waits for nothing.
 */
import { raceSignal } from '../../core/abort.js'
import type { AcquireRequest, HeldLease, LockInfo } from '../../core/backend.js'
import type { NodeAttempt, NodeRequest, QuorumNode } from '../../engines/quorum.js'
import type { ReleaseListener } from '../../engines/quorum-wait.js'
import type { RedlockNode } from './node.js'

export class RedlockDriver implements QuorumNode, ReleaseListener {
  constructor(
    readonly node: RedlockNode,
    /** How long a node must have been up before it votes (restartDelay, read at each vote). */
    readonly restartDelay: () => number,
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
    if (node.votes(delay)) return node.backend.tryAcquire(req, s)
    // A node that becomes ready after the verdict gets nothing: its acquire would follow the clean-up sent
    // at the verdict and leave a hold that blocks the node until its ttl.
    return node.ready(delay, s).then(() => {
      if (s.aborted) throw s.reason
      return node.backend.tryAcquire(req, s)
    })
  }

  raiseFence(key: string, owner: string, atLeast: bigint, s: AbortSignal): Promise<bigint> {
    return raceSignal(this.node.line.raiseFence(key, owner, atLeast), s)
  }

  extend(lease: HeldLease, ttlMs: number, s: AbortSignal) {
    const { node } = this
    const delay = this.restartDelay()
    if (node.votes(delay)) return node.backend.extend(lease, ttlMs, s)
    return node.ready(delay, s).then(() => node.backend.extend(lease, ttlMs, s))
  }

  release(lease: HeldLease, s: AbortSignal): Promise<boolean> {
    // Waits for the connection (and checks a reconnected server) but never keeps a release from a node,
    // admitted or not.
    const { node } = this
    if (node.isChecked) return node.backend.release(lease, s)
    return node.checked(s).then(() => node.backend.release(lease, s))
  }

  /** Sent at once, on the connection of the attempt's acquire (never waits for a check). */
  cleanUp(lease: HeldLease, s: AbortSignal): Promise<boolean> {
    return raceSignal(this.node.line.cleanUp(lease), s)
  }

  async abandon(req: NodeRequest, s: AbortSignal): Promise<void> {
    await this.node.backend.abandon?.(req, s)
  }

  /**
   * The node's hold of `key`, with its fence; for a free key, which keeps nothing once its holds are over,
   * the node's counter: every later grant here mints more (null on a node that never granted).
   */
  async inspect(key: string, s: AbortSignal): Promise<LockInfo | null> {
    await this.node.checked(s)
    const info = await this.node.backend.inspect(key, s)
    if (info !== null) return info
    const counter = await raceSignal(this.node.line.counter(), s)
    return counter > 0n ? { held: false, fence: counter } : null
  }

  /** Waits for the connection's check, as a release does: an operator's break reaches every node it can. */
  breakHold(key: string, owner: string, s: AbortSignal): Promise<boolean> {
    return this.node.checked(s).then(() => raceSignal(this.node.line.breakHold(key, owner), s))
  }

  listen(req: AcquireRequest, s: AbortSignal): Promise<string | undefined> {
    return this.node.backend.waitForMessage(req, s)
  }
}
