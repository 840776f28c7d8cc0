/**
 * ZooKeeper sessions as the session engine's adapter (src/engines/session/adapter.ts). A lease is a session:
 * everything on it (our ephemeral nodes) goes when the server expires it or we close it.
 *
 * - From a URL, each lease length is a session of its own (its own connection), asking the lock's ttl
 *   rounded up to whole seconds as its timeout (or `sessionTimeout` for every lease, when the URL sets it). The server clamps the
 *   timeout (2 to 20 ticks unless configured): the lease counts what it negotiated.
 * - With your client, there is one lease: your client's session, whatever the ttl; it is never closed by
 *   us, and its expiry loses every lock on it.
 *
 * Keep-alives: the client pings on its own without telling anyone, and a follower answers its pings and
 * reads alone (even one cut off from the leader, for up to `syncLimit` ticks). So the engine sends a write
 * the leader must order (`touchLeader`) every sixth of the negotiated timeout (`keepAliveEveryMs`), and
 * the answers count as evidence.ts says: each proves the session alive at the leader until the send time
 * of an earlier write, answered a third of the timeout before, plus the timeout. An acquire's create is
 * such a write too (`requestsKeepAlive`). Disconnected, nothing is answered and the validity runs out by
 * itself; the server saying "expired" (on reconnection) reports the lease lost at once.
 *
 * A session we open is created by the leader, which touches it then: a lease from its connect. With your
 * client, whose session may be old, the lease waits for its first evidence: two writes a third of the
 * timeout apart (the one timer of this folder, `firstEvidence`; a lock granted before would have no
 * validity and be given back).
 */
import { now } from '../../core/clock.js'
import type { Lease, LeaseEvents, SessionAdapter } from '../../engines/session/adapter.js'
import { CODE, closeClient, codeOf, touchLeader, type ZkClient } from './client.js'
import { LeaderEvidence } from './evidence.js'

/** One ZooKeeper session: the client whose connection carries it, and its id in hex once connected. */
export interface ZkSession {
  readonly client: ZkClient
  /** What the answers to our writes prove of its life at the leader; the queue's creates add theirs. */
  readonly evidence: LeaderEvidence
  /** The session id, 16 hex digits (as ZooKeeper's logs write it). */
  readonly id: string
  /** Expired or closed: nothing of ours is on it any more. */
  ended: boolean
}

/** Opens a client asking for a session timeout of `timeoutMs`, connecting. */
export type Connect = (timeoutMs: number) => ZkClient

/**
 * A write the leader orders (`touchLeader`), sent now: until when the leader is known to keep the session
 * (evidence.ts), or undefined when the server says it expired.
 */
async function touch(client: ZkClient, evidence: LeaderEvidence): Promise<number | undefined> {
  const sentAt = now()
  try {
    await touchLeader(client)
  } catch (error) {
    if (codeOf(error) === CODE.SESSION_EXPIRED) return undefined
    throw error
  }
  return evidence.answered(sentAt, client.getSessionTimeout())
}

/** How long a lease is proven from `sentAt`, at least 1 ms: "alive, nothing more proven" (0 would say lost). */
const provenFrom = (sentAt: number, until: number) => Math.max(1, until - sentAt)

/**
 * A session on `client`: its id once connected (ours: the leader created it then; yours: once evidence
 * proves it alive at the leader), and its expiry reported to `events`. `owned` clients are closed by
 * `revoke` (the server then deletes the session's ephemeral nodes at once).
 */
function sessionOn(client: ZkClient, events: LeaseEvents, owned: boolean): Lease<ZkSession> {
  // Before our connect request can be sent (the client sends it once its socket connects, a later turn).
  const startedAt = now()
  const evidence = new LeaderEvidence()
  let session: ZkSession | undefined
  let revoked = false
  const onExpired = () => {
    if (session) session.ended = true
    // The client stops by itself after an expiry (it never reconnects to an expired session).
    events.lost(new Error('its ZooKeeper session expired (the server deleted its ephemeral nodes)'))
  }
  const onAuthFailed = () => events.lost(new Error('its ZooKeeper session failed to authenticate'))
  const onDisconnected = () => evidence.disconnected()
  // A reconnection is the leader's own touch: counted at once, so that the locks of a connection that was
  // reset (after a stall) keep their validity instead of waiting for the next keep-alive's evidence.
  const onConnected = () => {
    const at = evidence.reconnected()
    if (at !== undefined) events.acknowledged(at, client.getSessionTimeout())
  }
  client.on('expired', onExpired)
  client.on('authenticationFailed', onAuthFailed)
  client.on('disconnected', onDisconnected)
  client.on('connected', onConnected)
  const id = new Promise<ZkSession>((resolve, reject) => {
    const made = () => {
      session = { client, evidence, id: client.getSessionId().toString('hex'), ended: false }
      resolve(session)
    }
    if (owned) {
      client.once('connected', () => {
        evidence.touchedAt(startedAt)
        made()
      })
    } else firstEvidence(client, evidence, () => revoked).then(made, reject)
  })
  id.catch(() => {})
  return {
    id,
    // Ours: the leader created the session after `startedAt`, so it keeps it that long from the grant.
    // Yours: `id` resolved on evidence of a touch after the grant began: the same holds.
    grantedMs: () => client.getSessionTimeout(),
    keepAliveOnce: async () => {
      if (!session) return 0
      const sentAt = now()
      const until = await touch(client, evidence)
      return until === undefined ? 0 : provenFrom(sentAt, until)
    },
    // An acquire's create is a write the leader orders: its answer is evidence as a keep-alive's is (the
    // queue adds it, queue.ts `#create`: an attempt that finds its node already there sends no write).
    requestsKeepAlive: (sentAt) => provenFrom(sentAt, evidence.until(client.getSessionTimeout())),
    revoke: async () => {
      revoked = true
      client.removeListener('expired', onExpired)
      client.removeListener('authenticationFailed', onAuthFailed)
      client.removeListener('disconnected', onDisconnected)
      client.removeListener('connected', onConnected)
      if (!owned) return
      if (session) session.ended = true
      // Closing the session deletes its ephemeral nodes on the server (a close that never reaches it
      // leaves them until the session times out).
      closeClient(client)
    },
  }
}

/**
 * Your client's first evidence (evidence.ts): a write, then another a third of the timeout after its
 * answer, whose answer proves the first one's send time. A write that fails (not connected yet, or the
 * connection lost) is sent again after the same pause; rejects when the session has expired or the lease
 * was revoked meanwhile.
 */
async function firstEvidence(
  client: ZkClient,
  evidence: LeaderEvidence,
  revoked: () => boolean,
): Promise<void> {
  const beganAt = now()
  while (evidence.touched < beganAt) {
    if (revoked()) throw new Error('the lease was revoked before its session was proven alive')
    const until = await touch(client, evidence).catch(() => Number.NEGATIVE_INFINITY)
    if (until === undefined) throw new Error('its ZooKeeper session expired')
    if (evidence.touched >= beganAt) return
    await new Promise((resolve) => setTimeout(resolve, Math.ceil(client.getSessionTimeout() / 3) + 1))
  }
}

/**
 * A sixth of the timeout: the evidence of a write counts from one answered a third of the timeout before
 * (evidence.ts), so the lease is proven about two thirds of the timeout ahead after each answer and never
 * less than half of it while the next one is under way.
 */
const keepAliveEvery = (grantedMs: number) => Math.max(50, Math.floor(grantedMs / 6))

/** From a URL: one session (connection) per lease length. */
export class OwnSessions implements SessionAdapter<ZkSession> {
  readonly #connect: Connect
  readonly #fixedMs: number | undefined

  /** `fixedMs`: the session timeout every lease asks for (the URL's `sessionTimeout`), instead of the ttl. */
  constructor(connect: Connect, fixedMs?: number) {
    this.#connect = connect
    this.#fixedMs = fixedMs
  }

  /**
   * Whole seconds, as etcd's leases: each lease length is a connection to the ensemble (servers limit them
   * per client address, `maxClientCnxns`, 60 by default), so ttls that differ by milliseconds share one.
   */
  leaseMs(ttlMs: number): number {
    return this.#fixedMs ?? Math.max(1, Math.ceil(ttlMs / 1000)) * 1000
  }

  /** `grantedMs`: the timeout the server negotiated (it may be far below the ttl asked: `maxSessionTimeout`). */
  keepAliveEveryMs(grantedMs: number): number {
    return keepAliveEvery(grantedMs)
  }

  grant(leaseMs: number, events: LeaseEvents): Lease<ZkSession> {
    return sessionOn(this.#connect(leaseMs), events, true)
  }
}

/** The lease length of the one session of a user's client: every ttl maps to it. */
export const SHARED_LEASE_MS = 2 ** 31 - 1

/** With the user's client: its one session for every ttl, never closed by us. */
export class SharedSession implements SessionAdapter<ZkSession> {
  readonly #client: ZkClient

  constructor(client: ZkClient) {
    this.#client = client
  }

  leaseMs(): number {
    return SHARED_LEASE_MS
  }

  keepAliveEveryMs(grantedMs: number): number {
    return keepAliveEvery(grantedMs)
  }

  grant(_leaseMs: number, events: LeaseEvents): Lease<ZkSession> {
    return sessionOn(this.#client, events, false)
  }
}
