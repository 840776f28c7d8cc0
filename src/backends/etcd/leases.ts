/**
 * etcd leases as the session engine's adapter (src/engines/session/adapter.ts): one etcd lease per session, kept
 * alive by the etcd3 client's keep-alive stream every ttl/3.
 */
import type { Etcd3 } from 'etcd3'
import { now } from '../../core/clock.js'
import { causeText } from '../../core/errors.js'
import type { Lease, LeaseEvents, SessionAdapter } from '../../engines/session/adapter.js'

/** A lease id, in hex (as Go writes it into key names) and as etcd's decimal string. */
export interface LeaseId {
  readonly hex: string
  readonly decimal: string
}

/** The lease id of etcd's decimal string. */
export const leaseIdOf = (decimal: string): LeaseId => ({ decimal, hex: BigInt(decimal).toString(16) })

export class EtcdLeases implements SessionAdapter<LeaseId> {
  readonly #client: Etcd3

  constructor(client: Etcd3) {
    this.#client = client
  }

  /** etcd leases are whole seconds (and the server may raise them to its minimum). */
  leaseMs(ttlMs: number): number {
    return Math.max(1, Math.ceil(ttlMs / 1000)) * 1000
  }

  grant(leaseMs: number, events: LeaseEvents): Lease<LeaseId> {
    const lease = this.#client.lease(leaseMs / 1000)
    // etcd3 keeps the lease alive every ttl/3 and tells us when it sends a keep-alive and when one is
    // answered; replies come in the order the keep-alives were sent, on one stream, so each success is
    // paired with the oldest send not yet answered.
    const fired: number[] = []
    lease.on('keepaliveFired', () => {
      fired.push(now())
    })
    lease.on('keepaliveSucceeded', (res: { TTL: string }) => {
      const at = fired.shift()
      if (at !== undefined) events.acknowledged(at, Number(res.TTL) * 1000)
    })
    lease.on('keepaliveFailed', () => {
      fired.length = 0
    })
    lease.on('lost', (error: Error) => {
      events.lost(new Error(`its etcd lease (session) ended: ${causeText(error, 200)}`))
    })
    return {
      id: lease.grant().then(leaseIdOf),
      keepAliveOnce: async () => Number((await lease.keepaliveOnce()).TTL) * 1000,
      // Revoking closes etcd3's keep-alive first, so even a revoke that never reaches etcd ends the lease.
      revoke: () => lease.revoke().catch(() => {}),
      // etcd3's "release": its keep-alive stream stops, the lease stays; keepaliveOnce still sends.
      stopKeepAlive: () => lease.release(),
    }
  }

  /**
   * A lease another client granted (its lock resumed here from a token): kept alive by `keepAliveOnce`
   * alone, on a keep-alive stream of its own that each call opens and ends, as etcd3's `keepaliveOnce` does.
   */
  adopt(id: LeaseId, events: LeaseEvents): Lease<LeaseId> {
    const leases = this.#client.leaseClient
    return {
      id: Promise.resolve(id),
      keepAliveOnce: async () => {
        const stream = await leases.leaseKeepAlive()
        let ttlMs: number
        try {
          const reply = await new Promise<{ TTL: string }>((resolve, reject) => {
            stream.on('data', resolve)
            stream.on('error', reject)
            stream.write({ ID: id.decimal })
          })
          ttlMs = Number(reply.TTL) * 1000
        } finally {
          stream.end()
        }
        if (ttlMs <= 0) events.lost(new Error('its etcd lease ended (expired or revoked)'))
        return ttlMs
      },
      revoke: () =>
        leases.leaseRevoke({ ID: id.decimal }).then(
          () => {},
          () => {},
        ),
    }
  }
}
