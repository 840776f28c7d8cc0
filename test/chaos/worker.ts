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
   * Take the leadership of an election named `key`, one permit of a semaphore named `key` of `limit`, or
   * the read-write lock `key` (half of the acquires as readers, who do not write), instead of the lock
   * (see Scenario.primitive).
   */
  readonly primitive?: 'election' | 'semaphore' | 'rwlock'
  readonly limit?: number
}

/** What a worker holds: a lock, or a leadership seen as one (its term is its fence); a read-write lock's mode. */
type Held = Pick<Lock, 'owner' | 'fence' | 'validUntil' | 'signal' | 'release'> & {
  readonly mode?: 'read' | 'write'
}

/**
 * Takes the lock, or campaigns for the election: a leader also proclaims a new value as it steps down,
 * so proclaims meet the same faults (one refused after a takeover aborts the signal: a `lost`).
 */
async function take(
  locks: LockClient,
  config: WorkerConfig,
  op: string,
  options: { timeout: number; signal?: AbortSignal },
): Promise<Held> {
  if (config.primitive === 'semaphore') {
    const held = await locks.semaphore(config.key, { limit: config.limit ?? 2 }).acquire(options)
    return {
      owner: held.owner,
      fence: held.sequence,
      get validUntil() {
        return held.validUntil
      },
      get signal() {
        return held.signal
      },
      release: () => held.release(),
    }
  }
  if (config.primitive === 'rwlock') {
    const rw = locks.rwlock(config.key)
    return Math.random() < 0.5 ? rw.read(options) : rw.write(options)
  }
  if (config.primitive !== 'election') return locks.acquire(config.key, options)
  const lead = await locks.election(config.key).campaign({ ...options, value: op })
  return {
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
  }
}

/** One history line, without `t` and `client` (the harness adds both). */
/**
 * Every line carries `at`, this process's CLOCK_MONOTONIC when it happened (the host's one clock, which the
 * harness stamps with too): stamps taken on receipt can swap two workers' lines that arrive within a
 * fraction of a millisecond, which a sub-millisecond hand-over makes look like an overlap. The harness
 * ignores `at` from a worker whose monotonic clock is faked (libfaketime fakes CLOCK_MONOTONIC too, unless
 * told not to: a wall clock faked alone leaves `at` good).
 */
const emit = (event: Record<string, unknown>) =>
  process.stdout.write(`${JSON.stringify({ ...event, at: monotonicMs() })}\n`)

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
  /** The lock held now, by owner, so a renewal (reported on a diagnostics channel) finds its op. */
  const held = new Map<string, { op: string; lock: Held }>()
  /** What the library said of each release (`release()` itself resolves with nothing). */
  const releases = new Map<string, boolean>()
  subscribe('fencelock:release', (message) => {
    const { owner, released } = message as { owner: string; released: boolean }
    releases.set(owner, released)
  })
  subscribe('fencelock:extend', (message) => {
    const { owner, outcome } = message as { owner: string; outcome: string }
    const h = held.get(owner)
    if (h && outcome === 'renewed') {
      emit({ ev: 'renew-ok', op: h.op, validInMs: h.lock.validUntil - performance.now() })
    }
  })

  for (let n = 1; !stopping; n++) {
    const op = `${config.id}-${n}`
    emit({ ev: 'acquire-invoke', op, key: config.key, ttlMs: config.ttlMs })
    let lock: Held
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
      lock = await take(locks, config, op, {
        timeout: config.timeoutMs,
        ...(controller ? { signal: controller.signal } : {}),
      })
    } catch (error) {
      // Refused until the timeout: definite. Anything else (a store that did not answer) may have been
      // applied: the checker counts a maybe-hold.
      const definite = error instanceof LockNotAcquiredError
      const reason = `${(error as Error).name}: ${(error as Error).message}`.slice(0, 300)
      emit({ ev: 'acquire-fail', op, key: config.key, definite, reason })
      if (error instanceof BackendUnavailableError || !definite) await sleep(50)
      continue
    }
    emit({
      ev: 'acquire-ok',
      op,
      key: config.key,
      owner: lock.owner,
      fence: lock.fence.toString(),
      validInMs: lock.validUntil - performance.now(),
      ...(lock.mode === undefined ? {} : { mode: lock.mode }),
    })
    held.set(lock.owner, { op, lock })
    const onLost = () => {
      const reason = lock.signal.reason as Error | undefined
      emit({ ev: 'lost', op, reason: `${reason?.name}: ${reason?.message}`.slice(0, 300) })
    }
    // Read past its validity (a stall), the signal is aborted already: no abort event will come. Read
    // once: a second read past validUntil would abort it between the check and the listener.
    const lost = lock.signal
    if (lost.aborted) onLost()
    else lost.addEventListener('abort', onLost, { once: true })
    // Read-modify-write on the resource, fenced by our token (written even if the lock was lost meanwhile:
    // that is the stale write a fenced resource must refuse).
    const key = encodeURIComponent(config.key)
    const values = JSON.parse(
      (await call(config.resourcePort, 'GET', `/read?key=${key}`)) || '[]',
    ) as string[]
    const [min, max] = config.holdMs
    await sleep(min + Math.random() * (max - min))
    const value = `${op}:${lock.fence}`
    const fence = lock.fence.toString()
    // A reader only reads: its fence is an epoch that other readers share, not a writer's.
    if (lock.mode !== 'read') {
      emit({ ev: 'write-invoke', op, key: config.key, fence, value })
      await call(config.resourcePort, 'POST', '/write', {
        op,
        key: config.key,
        fence,
        value,
        values: [...values, value],
      })
    }
    emit({ ev: 'release-invoke', op })
    try {
      await lock.release()
      emit({ ev: 'release-ok', op, released: releases.get(lock.owner) ?? false })
    } catch (error) {
      emit({ ev: 'release-fail', op, reason: `${(error as Error).message}`.slice(0, 300) })
    }
    held.delete(lock.owner)
    releases.delete(lock.owner)
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
