/**
 * What operators do with etcd's locks: `inspect` one, `list` the held ones under a prefix, `break` one.
 * All read the lock's keys as the queue-lock engine writes them (layout.ts): the holder is the key with
 * the lowest create revision under the lock's prefix; its create revision is the fence.
 *
 * - list: ranges over `<prefix><escaped user prefix>` in key order, a page (LIST_PAGE keys) per request,
 *   and keeps only the first key by create revision of each lock (a lock's keys are next to each other in
 *   key order: they share `<escaped name>/`). Its loop is the paging, not a retry. Each holder's remaining
 *   lease is one `leaseTimeToLive`, shared by the holders on one lease.
 * - break: reads the holder's key, then deletes it in a transaction conditioned on its create revision:
 *   exactly the grant read, never a later one (a key deleted and put again has a new create revision). The
 *   holder's own watch on its key, and its next extend's read, find it gone; the next key in line is the
 *   next holder through its predecessor watch; its create revision (the next fence) is above every earlier.
 *   A round that lost (the key went meanwhile) reads again, and ends only the grant the first round found.
 */
import type { Etcd3, IKeyValue } from 'etcd3'
import { raceSignal } from '../../core/abort.js'
import type { BreakOptions, BreakResult, ListedLock, LockInfo } from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { now } from '../../core/clock.js'
import { quoteKey } from '../../core/errors.js'
import { retryRounds } from '../../core/retry.js'
import { lockPrefix, prefixEnd, segment, unsegment } from './layout.js'
import { firstOf } from './queue.js'

/**
 * Keys per listing request. A key may be ~97 KiB (a 32 KiB name escaped to three times its length, see
 * ETCD_LIMITS): 32 of them stay under gRPC's default 4 MiB reply limit.
 */
export const LIST_PAGE = 32

/** How many leases' remaining time one listing remembers (the holders on one lease share one read). */
const LEASES_KEPT = 1024

/** Rounds of a break whose holder changed between its read and its delete (released, expired). */
const BREAK_ROUNDS = 10

const utf8 = (b: Buffer | undefined) => (b ? b.toString('utf8') : '')
const never = new AbortController().signal

/** `inspect`'s view of a holder's key, with its remaining lease when known. */
function heldView(
  holder: IKeyValue,
  expiresInMs: number | undefined,
): LockInfo & { readonly owner: string; readonly fence: bigint } {
  const value = utf8(holder.value)
  // "<owner> <description>" (our keys), or empty: Go's Mutex writes none, and the key names the holder.
  const space = value.indexOf(' ')
  return {
    held: true,
    owner: value === '' ? utf8(holder.key) : space < 0 ? value : value.slice(0, space),
    ...(space < 0 || space === value.length - 1 ? {} : { holder: value.slice(space + 1) }),
    fence: BigInt(holder.create_revision),
    ...(expiresInMs === undefined ? {} : { expiresInMs }),
    ...(value === ''
      ? { note: `held by a key not written by fencelock (${quoteKey(utf8(holder.key))})` }
      : {}),
  }
}

/** The remaining time (ms) of lease `id`, undefined when it has none or is gone. */
export async function leaseLeft(client: Etcd3, id: string, signal: AbortSignal): Promise<number | undefined> {
  if (id === '0') return undefined
  const ttl = await raceSignal(client.leaseClient.leaseTimeToLive({ ID: id }), signal)
  return Number(ttl.TTL) >= 0 ? Number(ttl.TTL) * 1000 : undefined
}

/** Who holds `key`: the first key of its prefix, and its lease's remaining time. */
export async function inspectLock(
  client: Etcd3,
  prefix: string,
  key: string,
  signal: AbortSignal,
): Promise<LockInfo> {
  const reply = await raceSignal(client.kv.range(firstOf(lockPrefix(key, prefix)).request_range), signal)
  const holder = reply.kvs[0]
  // Free: the store's revision, above the create revision (fence) of every grant so far and below the
  // next one's. The released keys are gone: no exact last fence is left to read.
  if (!holder) return { held: false, fence: BigInt(reply.header.revision) }
  return heldView(holder, await leaseLeft(client, holder.lease, signal))
}

/** The held locks whose names start with `userPrefix`, a page of keys at a time (see the header). */
export async function* listLocks(
  client: Etcd3,
  prefix: string,
  userPrefix: string,
  signal: AbortSignal,
  pageSize = LIST_PAGE,
): AsyncGenerator<ListedLock> {
  // The escaping maps each character on its own and no escape is the start of another, so the escaped
  // names under the escaped prefix are exactly the escaped names of the keys under the prefix.
  const under = `${prefix}${segment(userPrefix)}`
  const end = prefixEnd(under)
  const leases = new BoundedMap<string, { readonly ms: number | undefined; readonly at: number }>(LEASES_KEPT)
  /** The lock whose keys the listing is in, and its first key by create revision so far. */
  let lock: { readonly name: string; first: IKeyValue } | undefined

  const held = async (name: string, first: IKeyValue): Promise<ListedLock | undefined> => {
    const key = unsegment(name)
    // A name our escaping does not make (a foreign writer's) is no lock that inspect or break can name.
    if (key === undefined || !key.startsWith(userPrefix)) return undefined
    let known = leases.get(first.lease)
    if (!known) {
      known = { ms: await leaseLeft(client, first.lease, signal), at: now() }
      leases.set(first.lease, known)
    }
    if (known.ms !== undefined) {
      return { key, ...heldView(first, Math.max(0, known.ms - (now() - known.at))) }
    }
    // Its lease ended after the page was read (the key went with it): the lock as it is now.
    const info = await inspectLock(client, prefix, key, signal)
    return info.held ? { key, ...info } : undefined
  }

  let from = Buffer.from(under)
  let more: boolean
  do {
    const reply = await raceSignal(client.kv.range({ key: from, range_end: end, limit: pageSize }), signal)
    for (const kv of reply.kvs) {
      const full = kv.key.toString('utf8')
      const slash = full.indexOf('/', prefix.length)
      // Not a lock's key (nothing after an escaped name): nobody's entry in line.
      if (slash < 0) continue
      const name = full.slice(prefix.length, slash)
      if (lock && lock.name !== name) {
        const found = await held(lock.name, lock.first)
        if (found) yield found
        lock = undefined
      }
      if (!lock) lock = { name, first: kv }
      else if (BigInt(kv.create_revision) < BigInt(lock.first.create_revision)) lock.first = kv
    }
    more = reply.more && reply.kvs.length > 0
    // The next page starts just after the last key read.
    if (more) from = Buffer.concat([reply.kvs.at(-1)!.key, Buffer.from([0])])
  } while (more)
  if (lock) {
    const found = await held(lock.name, lock.first)
    if (found) yield found
  }
}

/** Deletes the holder's key of `key`, conditioned on its create revision (see the header). */
export function breakLock(
  client: Etcd3,
  prefix: string,
  key: string,
  options: BreakOptions = {},
): Promise<BreakResult> {
  const signal = options.signal ?? never
  const p = lockPrefix(key, prefix)
  // The grant the first round found: a later round ends only it, never a waiter's grant that followed it.
  let aimed = options.fence
  return retryRounds(
    BREAK_ROUNDS,
    async (): Promise<BreakResult | undefined> => {
      const holder = (await raceSignal(client.kv.range(firstOf(p).request_range), signal)).kvs[0]
      if (!holder) return { broken: false }
      const { owner, fence, holder: description } = heldView(holder, undefined)
      const lease = { owner, fence, ...(description === undefined ? {} : { holder: description }) }
      if (aimed !== undefined && aimed !== fence) return { broken: false, lease }
      aimed = fence
      const reply = await raceSignal(
        client.kv.txn({
          compare: [
            { target: 'Create', result: 'Equal', key: holder.key, create_revision: holder.create_revision },
          ],
          success: [{ request_delete_range: { key: holder.key } }],
          failure: [],
        }),
        signal,
      )
      // Not deleted: that key went meanwhile (released, or its lease ended); read who holds it now.
      return reply.succeeded ? { broken: true, lease } : undefined
    },
    () => new Error(`the lock's holder kept changing under ${BREAK_ROUNDS} attempts to break it`),
  )
}
