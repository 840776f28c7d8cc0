/**
 * `locks.resume(token)`: a held lock continued from its token (token.ts) in another process, or in this one
 * after a restart. The token's store must be this client's. One read first (`inspect`): a lease that expired,
 * was released or was taken over is refused before anything is written (some stores would let an extend
 * revive an expired lease nobody took). Then one owner-checked extend, the step that decides, as a renewal
 * does; its start counts the validity. The new handle renews and releases like any other; the token's
 * original handle is not told (see docs/resume.md: both may renew, and the first release ends the lease).
 */
import type { LockBackend, ResumeFacet } from './backend.js'
import { now } from './clock.js'
import { type Duration, describeValue } from './durations.js'
import { CapabilityError, LockLostError, quoteKey } from './errors.js'
import { type LockContext, LockHandle } from './lock.js'
import { assertKnownKeys, checkLimits, parseTtl, validUntil } from './options.js'
import { decodeToken } from './token.js'

/** What `resume` is told. */
export interface ResumeOptions {
  /** The lease from now on. @default the ttl of the lock the token was made of */
  readonly ttl?: Duration | undefined
  /** Renew automatically until released. @default the client's `renew` */
  readonly renew?: boolean | undefined
  /** Aborts the resume; it rejects with `signal.reason` unchanged. */
  readonly signal?: AbortSignal | undefined
}

/** What a resume needs from its client (src/core/client.ts). */
export interface ResumeRuntime {
  /** The backend, after the client's checks (closed, the key's limits). */
  open(key: string): Promise<LockBackend>
  /** The context of the client's locks on `backend`: its renewals, its held set. */
  context(backend: LockBackend): LockContext & { readonly held: Set<LockHandle> }
  /** One request, bounded as the client bounds its writes, and by the caller's signal. */
  bounded<T>(
    backend: LockBackend,
    key: string,
    signal: AbortSignal | undefined,
    run: (s: AbortSignal) => Promise<T>,
  ): Promise<T>
  /** The client's `renew`. */
  renews(): boolean
}

/** The lock `token` names, held again by this client; see the header. */
export async function resumeLock(
  token: string,
  options: ResumeOptions | undefined,
  runtime: ResumeRuntime,
): Promise<LockHandle> {
  if (options !== undefined && (typeof options !== 'object' || options === null)) {
    throw new TypeError(`Expected resume options to be an object, got ${describeValue(options)}`)
  }
  assertKnownKeys('resume options', options, ['ttl', 'renew', 'signal'])
  const fields = decodeToken(token)
  const { key, owner, fence } = fields
  const backend = await runtime.open(key)
  const facet = resumeFacet(backend, key)
  if (fields.backend !== backend.id) {
    throw new TypeError(
      `This token is for lock ${quoteKey(key)} on ${fields.backend}, and this client is on ${backend.id}: ` +
        'resume it with a client of the store it was made on',
    )
  }
  const context = { key, backend: backend.id }
  const ttlMs = options?.ttl === undefined ? fields.ttlMs : parseTtl(options.ttl)
  checkLimits(backend, key, ttlMs)
  const renew = options?.renew ?? runtime.renews()
  if (typeof renew !== 'boolean')
    throw new TypeError(`Expected \`renew\` to be a boolean, got ${describeValue(renew)}`)
  const signal = options?.signal
  const gone = (why: string) =>
    new LockLostError(
      `Cannot resume lock ${quoteKey(key)} on ${backend.id}: ${why}. The token's lease has ended; acquire the ` +
        'lock anew',
      context,
    )
  const info = await runtime.bounded(backend, key, signal, (s) => backend.inspect(key, s))
  if (!info?.held || info.owner !== owner) {
    throw gone(
      info?.held
        ? 'another owner holds it now (the lease expired and was taken over, or was broken)'
        : 'the store no longer holds it (released, expired or broken)',
    )
  }
  const decoded = await runtime.bounded(backend, key, signal, async (s) => {
    try {
      return await facet.decode({ key, owner, fence, cookie: fields.cookie }, s)
    } catch (error) {
      // The token's own data, not the store: said as it is, not as an outage.
      if (error instanceof TypeError) return { malformed: error }
      throw error
    }
  })
  if (decoded && 'malformed' in decoded) throw decoded.malformed
  if (!decoded) throw gone('the store no longer has it under this owner and fence')
  const lease = { key, owner, fence, cookie: decoded.cookie }
  const start = now()
  const outcome = await runtime.bounded(backend, key, signal, (s) => backend.extend(lease, ttlMs, s))
  if (!outcome.renewed) throw gone('the store no longer has it under this owner and fence')
  const kept = outcome.ttlMs === undefined ? ttlMs : Math.min(ttlMs, outcome.ttlMs)
  const ctx = runtime.context(backend)
  const until = validUntil(start, kept, ctx.driftFactor)
  if (now() >= until) throw gone('the store answered only after the lease it granted had passed')
  const lock = new LockHandle(
    ctx,
    outcome.cookie === undefined ? lease : { ...lease, cookie: outcome.cookie },
    { ttlMs, validUntil: until, shared: true, lost: decoded.lost },
    renew,
  )
  ctx.held.add(lock)
  return lock
}

/** The backend's resume facet, or the refusal, before any I/O. */
function resumeFacet(backend: LockBackend, key: string): ResumeFacet {
  if (backend.resume) return backend.resume
  throw new CapabilityError(
    `Cannot resume lock ${quoteKey(key)} on ${backend.id}: this backend cannot hand a lease to another process. ` +
      'See docs/resume.md for the stores that can, and why the others cannot',
    { key, backend: backend.id },
  )
}

/**
 * The resume facet of a store whose extend and release need nothing but the key, the owner id and the fence
 * (a Redis key holding the owner id, a SQL row with owner and fence): the token carries no cookie.
 */
export const OWNER_CHECKED_RESUME: ResumeFacet = {
  encode: () => undefined,
  decode: async (lease) => {
    if (lease.cookie !== undefined) {
      throw new TypeError(
        `This lock token is damaged: it carries data this store's tokens never have. Copy it whole`,
      )
    }
    return { cookie: undefined }
  },
}
