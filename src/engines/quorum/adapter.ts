/**
 * The adapter interface of the quorum engine (engine.ts): what one node of a quorum offers it, each
 * operation on that node alone, owner-checked, a throw counting as that node's failure in the round. The
 * node's own readiness to vote (Redlock's delayed restart and admission) is the adapter's business, inside
 * its `acquire` and `extend`. Used by: Redlock (src/backends/redlock/adapter.ts, over one Redis master).
 */
import type { HeldLease, LockInfo } from '../../core/backend.js'
import type { NodeAttempt, NodeRequest } from './line.js'

export type { NodeAttempt, NodeRequest } from './line.js'

/** One node of a quorum. Every primitive acts on this node alone; a throw is this node's failure. */
export interface QuorumAdapter {
  /** Names the node in errors. */
  readonly id: string
  /**
   * One attempt on this node (waiting first, if it must, until the node may vote). Granted when the lock
   * is free and `req.waiter` is the first live waiter of this node's line (or the line is empty): the
   * token this node minted, from a counter that never goes back; already held by `req.owner` = granted
   * too. Otherwise refused, and `req.waiter` stands in the line (ordered by ticket, then waiter id) at
   * `req.ticket`, or, while that is 0, where it stood or behind everyone: that place is the answer's ticket.
   */
  acquire(req: NodeRequest, signal: AbortSignal): Promise<NodeAttempt>
  /**
   * Raises `key`'s counter on this node to at least `atLeast` (never lowers it), and the fence this node
   * shows for the hold of attempt `owner`, if it holds `key` here.
   */
  raiseFence(key: string, owner: string, atLeast: bigint, signal: AbortSignal): Promise<unknown>
  /** Extends the lease if `lease.owner` holds it here (waiting first, if it must, until the node may vote). */
  extend(lease: HeldLease, ttlMs: number, signal: AbortSignal): Promise<{ readonly renewed: boolean }>
  /**
   * Releases if `lease.owner` holds it here (false when it was not), takes its acquire out of the line and
   * wakes the new first waiter. May wait for the node to be usable.
   */
  release(lease: HeldLease, signal: AbortSignal): Promise<boolean>
  /**
   * Releases at once, without waiting for anything: the clean-up of an attempt, which must travel right
   * behind that attempt's acquire to this node (and before the next attempt's). Its acquire keeps its
   * place in the line: it goes on.
   */
  cleanUp(lease: HeldLease, signal: AbortSignal): Promise<unknown>
  /** The node's own clean-up of an acquire that gave up: its place in the line (and any hold of `req.owner`). */
  abandon(req: NodeRequest, signal: AbortSignal): Promise<void>
  /** What this node holds for `key`. */
  inspect(key: string, signal: AbortSignal): Promise<LockInfo | null>
  /**
   * An operator's break (break.ts): ends the hold of `owner` (an owner id on the nodes) if it is
   * still there (true), never another's; its fence counter stays; wakes the first waiter as a release does.
   */
  breakHold?(key: string, owner: string, signal: AbortSignal): Promise<boolean>
}
