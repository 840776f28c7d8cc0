/**
 * ZooKeeper sessions as the session engine's driver (src/engines/session.ts). A lease is a session:
 * everything on it (our ephemeral nodes) goes when the server expires it or we close it.
 *
 * - From a URL, each lease length is a session of its own (its own connection), asking the lock's ttl
 *   rounded up to whole seconds as its timeout (or `sessionTimeout` for every lease, when the URL sets it). The server clamps the
 *   timeout (2 to 20 ticks unless configured): the lease counts what it negotiated.
 * - With your client, there is one lease: your client's session, whatever the ttl; it is never closed by
 *   us, and its expiry loses every lock on it.
 *
 * Keep-alives: the client pings on its own without telling anyone, so the engine sends a request every
 * third of the session timeout (`keepAliveEveryMs`) and counts its reply: its send time plus the negotiated
 * timeout is a lower bound of the session's life, since the server expires a session no earlier than its
 * last receipt (on the leader, which hears of a follower's receipts later still) plus the timeout.
 * Disconnected, no request is answered and the validity runs out by itself; the server saying "expired"
 * (on reconnection) reports the lease lost at once. Any other request answered counts the same way
 * (`requestsKeepAlive`: the server touches the session on every request it receives), so an acquire's
 * create is its own keep-alive and needs no `exists('/')` beside it.
 */
import type { Lease, LeaseDriver, LeaseEvents } from '../../engines/session.js'
import { CODE, closeClient, codeOf, stat, type ZkClient } from './client.js'

/** One ZooKeeper session: the client whose connection carries it, and its id in hex once connected. */
export interface ZkSession {
  readonly client: ZkClient
  /** The session id, 16 hex digits (as ZooKeeper's logs write it). */
  readonly id: string
  /** Expired or closed: nothing of ours is on it any more. */
  ended: boolean
}

/** Opens a client asking for a session timeout of `timeoutMs`, connecting. */
export type Connect = (timeoutMs: number) => ZkClient

/** Whether `client` is connected now (SYNC_CONNECTED, or read-only). */
const connected = (client: ZkClient) => {
  const name = client.getState().name
  return name === 'SYNC_CONNECTED' || name === 'CONNECTED_READ_ONLY'
}

/** A request that every server answers from its memory: `exists('/')`; the session timeout when answered. */
async function ping(session: ZkSession): Promise<number> {
  try {
    await stat(session.client, '/')
    return session.client.getSessionTimeout()
  } catch (error) {
    if (codeOf(error) === CODE.SESSION_EXPIRED) return 0
    throw error
  }
}

/**
 * A session on `client`: its id once connected, and its expiry reported to `events`. `owned` clients are
 * closed by `revoke` (the server then deletes the session's ephemeral nodes at once).
 */
function sessionOn(client: ZkClient, events: LeaseEvents, owned: boolean): Lease<ZkSession> {
  let session: ZkSession | undefined
  const onExpired = () => {
    if (session) session.ended = true
    // The client stops by itself after an expiry (it never reconnects to an expired session).
    events.lost(new Error('its ZooKeeper session expired (the server deleted its ephemeral nodes)'))
  }
  const onAuthFailed = () => events.lost(new Error('its ZooKeeper session failed to authenticate'))
  client.on('expired', onExpired)
  client.on('authenticationFailed', onAuthFailed)
  const id = new Promise<ZkSession>((resolve) => {
    const made = () => {
      session = { client, id: client.getSessionId().toString('hex'), ended: false }
      resolve(session)
    }
    if (connected(client)) made()
    else client.once('connected', made)
  })
  return {
    id,
    grantedMs: () => client.getSessionTimeout(),
    keepAliveOnce: async () => (session ? await ping(session) : 0),
    // Any request the server answers touched the session (as the ping does): the create of an acquire
    // keeps it alive from its send time, for the negotiated timeout.
    requestsKeepAlive: () => client.getSessionTimeout(),
    revoke: async () => {
      client.removeListener('expired', onExpired)
      client.removeListener('authenticationFailed', onAuthFailed)
      if (!owned) return
      if (session) session.ended = true
      // Closing the session deletes its ephemeral nodes on the server (a close that never reaches it
      // leaves them until the session times out).
      closeClient(client)
    },
  }
}

/** From a URL: one session (connection) per lease length. */
export class OwnSessions implements LeaseDriver<ZkSession> {
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

  keepAliveEveryMs(leaseMs: number): number {
    return Math.max(50, Math.floor(leaseMs / 3))
  }

  grant(leaseMs: number, events: LeaseEvents): Lease<ZkSession> {
    return sessionOn(this.#connect(leaseMs), events, true)
  }
}

/** The lease length of the one session of a user's client: every ttl maps to it. */
export const SHARED_LEASE_MS = 2 ** 31 - 1

/** With the user's client: its one session for every ttl, never closed by us. */
export class SharedSession implements LeaseDriver<ZkSession> {
  readonly #client: ZkClient

  constructor(client: ZkClient) {
    this.#client = client
  }

  leaseMs(): number {
    return SHARED_LEASE_MS
  }

  keepAliveEveryMs(): number {
    return Math.max(50, Math.floor(this.#client.getSessionTimeout() / 3))
  }

  grant(_leaseMs: number, events: LeaseEvents): Lease<ZkSession> {
    return sessionOn(this.#client, events, false)
  }
}
