/**
 * The file backend's first use of a lock root: many acquires of new keys at once on a fresh root, on a
 * disk that flushes slowly or not at all. The root, its epochs and the boot's reservation (the one
 * fsynced write of a boot) are made once and shared by every first acquire of the process; nothing waits
 * for the disk on the event loop; an attempt the core stopped waiting for takes nothing; a take lost to
 * another writer answers what the folder then holds. A slow disk is played by the backend's own Flush
 * (every fsync it makes goes through it), gated on turns of the event loop counted by an interval.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { epochOf } from '../../../src/backends/file/epochs.js'
import { Flush, GEN_NAME, keyFolderName } from '../../../src/backends/file/generations.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { BackendUnavailableError, createLockClient, type Lock } from '../../../src/index.js'
import { tempDir } from '../../support/temp.js'

const dir = tempDir('file-first-use')
after(() => dir.cleanup())

/** A root that does not exist yet: the first acquires make it. */
const newRoot = () => join(dir.path, randomBytes(4).toString('hex'), 'locks')
const keys = (n: number) =>
  Array.from({ length: n }, (_, i) => `first-${i}:${randomBytes(3).toString('hex')}`)

/** Counts turns of the event loop (an interval's ticks); `after(n)` resolves once n more have passed. */
class Ticker {
  count = 0
  readonly #waiting: Array<{ at: number; done: () => void }> = []
  readonly #timer = setInterval(() => {
    this.count++
    for (const w of this.#waiting.filter((w) => w.at <= this.count)) {
      this.#waiting.splice(this.#waiting.indexOf(w), 1)
      w.done()
    }
  }, 5)

  after(ticks: number): Promise<void> {
    return new Promise((done) => this.#waiting.push({ at: this.count + ticks, done }))
  }

  stop(): void {
    clearInterval(this.#timer)
  }
}

/**
 * A slow disk as the process sees it: one flush at a time, each done only after `ticks` turns of the
 * event loop (so a flush completes only while the loop runs), or not at all while `held`.
 */
class SlowDisk extends Flush {
  #queue: Promise<void> = Promise.resolve()
  #opened: (() => void) | undefined
  readonly #open: Promise<void>
  /** Resolves when the first flush is asked for. */
  readonly asked: Promise<void>
  #asked: (() => void) | undefined

  constructor(
    readonly ticker: Ticker,
    readonly ticks: number,
    held = false,
  ) {
    super()
    this.#open = held
      ? new Promise((done) => {
          this.#opened = done
        })
      : Promise.resolve()
    this.asked = new Promise((done) => {
      this.#asked = done
    })
  }

  /** Lets the held flushes through. */
  open(): void {
    this.#opened?.()
  }

  override fd(fd: number): Promise<void> {
    return this.#slowly(() => super.fd(fd))
  }

  override path(path: string): Promise<void> {
    return this.#slowly(() => super.path(path))
  }

  #slowly(flush: () => Promise<void>): Promise<void> {
    this.#asked?.()
    const turn = this.#queue.then(async () => {
      await this.#open
      await this.ticker.after(this.ticks)
      await flush()
    })
    this.#queue = turn.catch(() => {})
    return turn
  }
}

/** What one acquire came to, and how long it took. */
async function timed(acquire: Promise<Lock>): Promise<{ lock?: Lock; error?: unknown; ms: number }> {
  const started = performance.now()
  try {
    const lock = await acquire
    return { lock, ms: performance.now() - started }
  } catch (error) {
    return { error, ms: performance.now() - started }
  }
}

/** The messages of the acquires that failed, for an assertion's message. */
const failures = (outcomes: Array<{ error?: unknown }>) =>
  outcomes.filter((o) => o.error).map((o) => (o.error as Error).message)

describe('file backend: first use of a lock root', () => {
  for (const clients of [1, 64]) {
    it(`64 first acquires of new keys at once (${clients} client${clients > 1 ? 's' : ''}): all granted, one epoch, one reservation`, async () => {
      const root = newRoot()
      const flush = new Flush()
      const all = Array.from({ length: clients }, () =>
        createLockClient(fileBackend({ dir: root }, { flush }), { ttl: '30s', renew: false }),
      )
      try {
        const outcomes = await Promise.all(
          keys(64).map((key, i) => timed(all[i % clients]!.acquire(key, { timeout: '20s' }))),
        )
        assert.deepEqual(failures(outcomes), [])
        const fences = outcomes.map((o) => o.lock!.fence)
        // One epoch shared by every new key (each still checked after its own pin), and the boot's one
        // reservation: its record, its name, and the new `.boot` folder's name in the root.
        assert.equal(new Set(fences.map(epochOf)).size, 1, `epochs of the fences: ${fences.map(epochOf)}`)
        assert.ok(flush.count <= 3, `the first use made ${flush.count} fsyncs`)
        await Promise.all(outcomes.map((o) => o.lock!.release()))
      } finally {
        await Promise.all(all.map((c) => c.close()))
      }
    })
  }

  it('a slow disk: the event loop runs through every flush, and the first acquires are granted in time', async () => {
    const ticker = new Ticker()
    // 20 turns of the loop per flush, one flush at a time: 3 flushes for the first use, or ~85 if every
    // first acquire wrote its own reservation (more than the 5 s an attempt is given at most, here).
    const disk = new SlowDisk(ticker, 20)
    const locks = createLockClient(fileBackend({ dir: newRoot() }, { flush: disk }), {
      ttl: '5s',
      renew: false,
    })
    try {
      const outcomes = await Promise.all(keys(64).map((key) => timed(locks.acquire(key, { timeout: '8s' }))))
      assert.deepEqual(failures(outcomes), [])
      assert.ok(disk.count <= 3, `the first use made ${disk.count} fsyncs`)
      // Each flush took its turns of the loop: the loop ran while the acquires waited for the disk.
      assert.ok(ticker.count >= disk.count * 20, `${ticker.count} ticks for ${disk.count} flushes`)
      await Promise.all(outcomes.map((o) => o.lock!.release()))
    } finally {
      ticker.stop()
      await locks.close()
    }
  })

  it('a disk that does not flush: each first acquire fails on time, as unavailable, not as held', async () => {
    const ticker = new Ticker()
    const disk = new SlowDisk(ticker, 1, true)
    const locks = createLockClient(fileBackend({ dir: newRoot() }, { flush: disk }), {
      ttl: '5s',
      renew: false,
    })
    try {
      const ticksBefore = ticker.count
      const outcomes = await Promise.all(
        keys(16).map((key) => timed(locks.acquire(key, { timeout: '1500ms' }))),
      )
      for (const { error, ms } of outcomes) {
        assert.ok(error instanceof BackendUnavailableError, `not unavailable: ${String(error)}`)
        assert.doesNotMatch(error.message, /held by another owner/)
        // The timeout, the core's settling time (500 ms), and generous slack for a loaded machine.
        assert.ok(ms < 1500 + 500 + 3000, `settled after ${Math.round(ms)} ms`)
      }
      assert.ok(ticker.count > ticksBefore, 'the event loop did not turn while the disk held its flush')
    } finally {
      disk.open()
      ticker.stop()
      await locks.close()
    }
  })

  it('an attempt whose signal aborted while the disk held its flush takes nothing once the disk answers', async () => {
    const root = newRoot()
    const ticker = new Ticker()
    const disk = new SlowDisk(ticker, 1, true)
    const backend = fileBackend({ dir: root }, { flush: disk })
    try {
      const key = keys(1)[0]!
      const stop = new AbortController()
      const attempt = backend.tryAcquire({ key, owner: 'gave-up', ttlMs: 30_000 }, stop.signal)
      attempt.catch(() => {})
      await disk.asked
      stop.abort(new Error('the core stopped waiting'))
      disk.open()
      const result = await attempt
      assert.equal(result.granted, false)
      const generations = readdirSync(join(root, keyFolderName(key))).filter((n) => GEN_NAME.test(n))
      assert.deepEqual(generations, [], 'a lease was written for an attempt nobody waits for')
    } finally {
      disk.open()
      ticker.stop()
      await backend.close()
    }
  })

  it("a first acquire that loses the race for a new key answers the winner's lease", async () => {
    const root = newRoot()
    const one = fileBackend({ dir: root })
    const two = fileBackend({ dir: root })
    const key = keys(1)[0]!
    const signal = new AbortController().signal
    const results = await Promise.all([
      one.tryAcquire({ key, owner: 'one', ttlMs: 30_000 }, signal),
      two.tryAcquire({ key, owner: 'two', ttlMs: 30_000 }, signal),
    ])
    const granted = results.filter((r) => r.granted)
    assert.equal(granted.length, 1)
    const [lost] = results.filter((r) => !r.granted)
    // Not a bare refusal: when to look again, from the winner's record (its lease, or its holder's check).
    assert.ok(
      lost && !lost.granted && lost.retryInMs !== undefined && lost.retryInMs > 0,
      `the loser answered ${JSON.stringify(lost)}`,
    )
  })
})
