/**
 * A chaos worker: a separate process (so the nemesis can SIGSTOP or SIGKILL exactly one client) that runs
 * the library in a loop: acquire → read-modify-write on the protected resource, carrying the fence →
 * release. Every step is one JSON line on stdout, stamped with this process's CLOCK_MONOTONIC (`at`, see
 * `emit`); the harness stamps a worker whose monotonic clock is faked (libfaketime) on receipt instead.
 * Times that only the worker knows (a validity deadline) travel as "ms from now" of its own clock.
 *
 * Usage: node worker.js '<json WorkerConfig>'; stdin "stop" ends the loop after the current cycle.
 */
import { subscribe } from 'node:diagnostics_channel'
import { request } from 'node:http'
import { createInterface } from 'node:readline'
import { slotKey } from '../../src/core/slots.js'
import {
  BackendUnavailableError,
  createLockClient,
  type Lock,
  type LockClient,
  LockNotAcquiredError,
} from '../../src/index.js'
import { monotonicMs, sleep } from '../support/time.js'
import { watchStalls } from './stalls.js'

export interface WorkerConfig {
  readonly id: string
  readonly url: string
  readonly key: string
  readonly ttlMs: number
  /** How long one acquire may wait. */
  readonly timeoutMs: number
  /** Time spent holding the lock before the write, ms: [min, max). */
  readonly holdMs: readonly [number, number]
  /** The protected resource (harness HTTP server on loopback). */
  readonly resourcePort: number
  /** Abort half of the acquires after a random delay below this (ms): at any await point. */
  readonly abortWithinMs?: number
  /**
   * Take the leadership of an election named `key`, one permit of a semaphore named `key` of `limit`,
   * several keys under `key` at once (multikey: one by one; multikey-atomic: in one step of the store), or the read-write lock `key` (half of the acquires as
   * readers, who do not write), instead of the lock (see Scenario.primitive).
   */
  readonly primitive?: 'election' | 'semaphore' | 'slots' | 'multikey' | 'multikey-atomic' | 'rwlock'
  readonly limit?: number
}

/** What a worker holds: a lock, or a leadership seen as one (its term is its fence); a read-write lock's mode. */
type Held = Pick<Lock, 'owner' | 'fence' | 'validUntil' | 'signal' | 'release'> & {
  readonly mode?: 'read' | 'write'
}

/** One key of an acquisition, with the op the history knows it by. */
interface Part {
  readonly op: string
  readonly key: string
}

/** What one acquisition took: a hold per key (one, except for multi-key), and the release of them all. */
interface Taken {
  readonly holds: ReadonlyArray<Part & { readonly held: Held }>
  /** The parts asked for but not taken (the slots of a slots semaphore left to others). */
  readonly untaken?: readonly Part[]
  release(): Promise<void>
}

/** The keys a multi-key worker draws from (`<key>:a` …), overlapping between workers. */
const MULTI_KEYS = ['a', 'b', 'c']

/**
 * The keys of one acquisition, with their ops: the scenario's key; or, for multi-key, two or three of
 * MULTI_KEYS in a random order (with a duplicate now and then), one op per key (`<op>~<key>`) so the
 * checker's per-key rules see each key's hold.
 */
function partsOf(config: WorkerConfig, op: string): { asked: string[]; parts: Part[] } {
  if (config.primitive === 'slots') {
    // Any slot may be the one granted: each is a part, those not taken end as refused.
    const limit = config.limit ?? 2
    const parts = [...Array(limit).keys()].map((i) => slotKey(config.key, limit, i))
    return { asked: parts, parts: parts.map((key) => ({ op: `${op}~${key}`, key })) }
  }
  if (!config.primitive?.startsWith('multikey'))
    return { asked: [config.key], parts: [{ op, key: config.key }] }
  const shuffled = MULTI_KEYS.map((k) => `${config.key}:${k}`).sort(() => Math.random() - 0.5)
  const asked = shuffled.slice(0, Math.random() < 0.5 ? 2 : 3)
  if (Math.random() < 0.2) asked.push(asked[0]!)
  const parts = [...new Set(asked)].map((key) => ({ op: `${op}~${key}`, key }))
  return { asked, parts }
}

/**
 * Takes the lock, or campaigns for the election: a leader also proclaims a new value as it steps down,
 * so proclaims meet the same faults (one refused after a takeover aborts the signal: a `lost`).
 */
async function take(
  locks: LockClient,
  config: WorkerConfig,
  op: string,
  asked: readonly string[],
  options: { timeout: number; signal?: AbortSignal },
): Promise<Taken> {
  const one = (held: Held): Taken => ({
    holds: [{ op, key: config.key, held }],
    release: () => held.release(),
  })
  if (config.primitive === 'multikey' || config.primitive === 'multikey-atomic') {
    const all = await locks.acquireAll(asked, { ...options, atomic: config.primitive === 'multikey-atomic' })
    return {
      holds: all.keys.map((key) => ({ op: `${op}~${key}`, key, held: all.locks.get(key)! })),
      release: async () => void (await all.release()),
    }
  }
  if (config.primitive === 'slots') {
    const limit = config.limit ?? 2
    const permits = await locks.semaphore(config.key, { limit, layout: 'slots' }).acquire(options)
    const taken = new Set(permits.slots.map((slot) => slot.key))
    return {
      holds: permits.slots.map((slot) => ({ op: `${op}~${slot.key}`, key: slot.key, held: slot })),
      untaken: asked.filter((key) => !taken.has(key)).map((key) => ({ op: `${op}~${key}`, key })),
      release: () => permits.release(),
    }
  }
  if (config.primitive === 'semaphore') {
    const held = await locks.semaphore(config.key, { limit: config.limit ?? 2 }).acquire(options)
    return one({
      owner: held.owner,
      fence: held.sequence,
      get validUntil() {
        return held.validUntil
      },
      get signal() {
        return held.signal
      },
      release: () => held.release(),
    })
  }
  if (config.primitive === 'rwlock') {
    const rw = locks.rwlock(config.key)
    return one(await (Math.random() < 0.5 ? rw.read(options) : rw.write(options)))
  }
  if (config.primitive !== 'election') return one(await locks.acquire(config.key, options))
  const lead = await locks.election(config.key).campaign({ ...options, value: op })
  return one({
    owner: lead.owner,
    fence: lead.term,
    get validUntil() {
      return lead.validUntil
    },
    get signal() {
      return lead.signal
    },
    release: async () => {
      await lead.proclaim(`${op}:leaving`).catch(() => {})
      await lead.resign()
    },
  })
}

/** One history line, without `t` and `client` (the harness adds both). */
/**
 * Every line carries `at`, this process's CLOCK_MONOTONIC when it happened (the host's one clock, which the
 * harness stamps with too): stamps taken on receipt can swap two workers' lines that arrive within a
 * fraction of a millisecond, which a sub-millisecond hand-over makes look like an overlap. The harness
 * ignores `at` from a worker whose monotonic clock is faked (libfaketime fakes CLOCK_MONOTONIC too, unless
 * told not to: a wall clock faked alone leaves `at` good).
 */
const emit = (event: Record<string, unknown>) => emitAll([event])

/**
 * Several events in one write: a pause (SIGSTOP) cannot fall between them, so the holds of one acquisition
 * are reported at one time, as they were granted (a pause after the first would date the others later).
 */
const emitAll = (events: readonly Record<string, unknown>[], at = monotonicMs()) => {
  process.stdout.write(events.map((event) => `${JSON.stringify({ ...event, at })}\n`).join(''))
}

/**
 * One HTTP exchange with the resource; resolves with the reply body ('' if it failed: a write that does
 * not arrive is no write, and the resource records only what it decided).
 */
function call(port: number, method: 'GET' | 'POST', path: string, body?: object): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, method, path }, (res) => {
      let text = ''
      res.on('data', (chunk) => {
        text += chunk
      })
      res.on('end', () => resolve(text))
    })
    req.on('error', () => resolve(''))
    req.setTimeout(5000, () => req.destroy())
    req.end(body === undefined ? undefined : JSON.stringify(body))
  })
}

async function main(config: WorkerConfig): Promise<void> {
  const locks = createLockClient(config.url, { ttl: config.ttlMs })
  let stopping = false
  // A loaded machine can leave this process without CPU past a lease's end: report it, as a pause.
  watchStalls((ms) => emit({ ev: 'stall', ms }))
  createInterface({ input: process.stdin }).on('line', (line) => {
    if (line.trim() === 'stop') stopping = true
  })
  /**
   * The lock held now, by owner and key (the keys of an atomic set share their acquire's owner), so a
   * renewal (reported on a diagnostics channel) finds its op.
   */
  const held = new Map<string, { op: string; lock: Held }>()
  const heldId = (owner: string, key: string) => `${key}\n${owner}`
  /** What the library said of each release (`release()` itself resolves with nothing). */
  const releases = new Map<string, boolean>()
  subscribe('fencelock:release', (message) => {
    const { owner, key, released } = message as { owner: string; key: string; released: boolean }
    releases.set(heldId(owner, key), released)
  })
  subscribe('fencelock:extend', (message) => {
    const { owner, key, outcome } = message as { owner: string; key: string; outcome: string }
    const h = held.get(heldId(owner, key))
    if (h && outcome === 'renewed') {
      emit({ ev: 'renew-ok', op: h.op, validInMs: h.lock.validUntil - performance.now() })
    }
  })

  for (let n = 1; !stopping; n++) {
    const op = `${config.id}-${n}`
    const { asked, parts } = partsOf(config, op)
    for (const part of parts) emit({ ev: 'acquire-invoke', ...part, ttlMs: config.ttlMs })
    let taken: Taken
    try {
      // Half of the acquires are aborted (when the scenario asks): a quarter one event-loop turn after the
      // call (the attempt's request is out, its reply not yet read: the race a timer of >= 1 ms would almost
      // never hit on loopback), a quarter after a random delay (while waiting, or at a hand-over).
      const controller = config.abortWithinMs === undefined ? undefined : new AbortController()
      const dice = Math.random()
      if (controller && dice < 0.25) setImmediate(() => controller.abort(new Error('aborted in flight')))
      else if (controller && dice < 0.5) {
        setTimeout(() => controller.abort(new Error('aborted')), Math.random() * config.abortWithinMs!)
      }
      taken = await take(locks, config, op, asked, {
        timeout: config.timeoutMs,
        ...(controller ? { signal: controller.signal } : {}),
      })
    } catch (error) {
      // Refused until the timeout: definite. Anything else (a store that did not answer) may have been
      // applied: the checker counts a maybe-hold.
      const definite = error instanceof LockNotAcquiredError
      const reason = `${(error as Error).name}: ${(error as Error).message}`.slice(0, 300)
      for (const part of parts) emit({ ev: 'acquire-fail', ...part, definite, reason })
      if (error instanceof BackendUnavailableError || !definite) await sleep(50)
      continue
    }
    for (const part of taken.untaken ?? []) {
      emit({ ev: 'acquire-fail', ...part, definite: true, reason: 'another slot was granted' })
    }
    // The time first, the validity left after it: a pause in between shortens the validity reported.
    const at = monotonicMs()
    const grantedAt = performance.now()
    emitAll(
      taken.holds.map(({ op, key, held: lock }) => ({
        ev: 'acquire-ok',
        op,
        key,
        owner: lock.owner,
        fence: lock.fence.toString(),
        validInMs: lock.validUntil - grantedAt,
        ...(lock.mode === undefined ? {} : { mode: lock.mode }),
      })),
      at,
    )
    for (const { op, key, held: lock } of taken.holds) {
      held.set(heldId(lock.owner, key), { op, lock })
      const onLost = () => {
        const reason = lock.signal.reason as Error | undefined
        emit({ ev: 'lost', op, reason: `${reason?.name}: ${reason?.message}`.slice(0, 300) })
      }
      // Read past its validity (a stall), the signal is aborted already: no abort event will come. Read
      // once: a second read past validUntil would abort it between the check and the listener.
      const lost = lock.signal
      if (lost.aborted) onLost()
      else lost.addEventListener('abort', onLost, { once: true })
    }
    // Read-modify-write on the resource, per key, fenced by that key's token (written even if the lock was
    // lost meanwhile: that is the stale write a fenced resource must refuse).
    const reads = await Promise.all(
      taken.holds.map(
        async ({ key }) =>
          JSON.parse(
            (await call(config.resourcePort, 'GET', `/read?key=${encodeURIComponent(key)}`)) || '[]',
          ) as string[],
      ),
    )
    const [min, max] = config.holdMs
    await sleep(min + Math.random() * (max - min))
    for (const [i, { op, key, held: lock }] of taken.holds.entries()) {
      // A reader only reads: its fence is an epoch that other readers share, not a writer's.
      if (lock.mode === 'read') continue
      const value = `${op}:${lock.fence}`
      const fence = lock.fence.toString()
      emit({ ev: 'write-invoke', op, key, fence, value })
      await call(config.resourcePort, 'POST', '/write', {
        op,
        key,
        fence,
        value,
        values: [...reads[i]!, value],
      })
    }
    for (const { op } of taken.holds) emit({ ev: 'release-invoke', op })
    try {
      await taken.release()
      for (const { op, key, held: lock } of taken.holds) {
        emit({ ev: 'release-ok', op, released: releases.get(heldId(lock.owner, key)) ?? false })
      }
    } catch (error) {
      for (const { op } of taken.holds) {
        emit({ ev: 'release-fail', op, reason: `${(error as Error).message}`.slice(0, 300) })
      }
    }
    for (const { key, held: lock } of taken.holds) {
      held.delete(heldId(lock.owner, key))
      releases.delete(heldId(lock.owner, key))
    }
  }
  await locks.close()
}

main(JSON.parse(process.argv[2] ?? '{}') as WorkerConfig).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`${(error as Error)?.stack ?? error}\n`)
    process.exit(1)
  },
)
