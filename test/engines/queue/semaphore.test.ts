import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { AcquireRequest, Grant } from '../../../src/core/backend.js'
import type { Cancel } from '../../../src/engines/queue/adapter.js'
import type {
  LineEvents,
  LineRead,
  PermitEntry,
  PermitValue,
  SemaphoreAdapter,
} from '../../../src/engines/queue/semaphore-adapter.js'
import { type PermitAcquisition, QueueSemaphore } from '../../../src/engines/queue/semaphore-engine.js'
import { awaitLater } from '../../support/later.js'
import { FakeQueueStore, settle } from './fake-store.js'

/**
 * The queue engine's semaphore against an in-memory line: the waiters of one client share one watch, and
 * a change between a waiter's read and its next wait wakes it at once (none is missed).
 */

/** One semaphore's line in memory; a watch replays the changes from its start, as etcd's does. */
class FakeLine implements SemaphoreAdapter<number> {
  position = 0n
  limit: number | undefined
  readonly entries = new Map<string, { readonly position: bigint; readonly permits: number }>()
  readonly #changes: bigint[] = []
  readonly #watches = new Map<LineEvents, bigint>()
  watchesMade = 0

  lineOf(name: string): string {
    return `${name}/`
  }
  nameOf(line: string, lease: number, owner: string): string {
    return `${line}${lease}-${owner}`
  }
  #read(name: string, cap: number): LineRead {
    const mine = this.entries.get(name)
    const ahead = [...this.entries.values()]
      .filter((e) => mine !== undefined && e.position < mine.position)
      .sort((a, b) => Number(a.position - b.position))
    return {
      limit: this.limit,
      position: mine?.position,
      ahead: ahead.slice(0, cap).map((e) => e.permits),
      complete: ahead.length <= cap,
      at: this.position,
    }
  }
  async enqueue(_line: string, name: string, value: PermitValue, _lease: number, cap: number) {
    await settle()
    if (!this.entries.has(name))
      this.#change(() => this.entries.set(name, { position: this.position + 1n, permits: value.permits }))
    this.limit ??= value.limit
    return this.#read(name, cap)
  }
  async check(entry: PermitEntry, cap: number) {
    await settle()
    return this.#read(entry.name, cap)
  }
  async read(entry: PermitEntry) {
    return this.entries.get(entry.name)?.position === entry.position
  }
  watch(_line: string, from: bigint, events: LineEvents): Cancel {
    this.watchesMade++
    this.#watches.set(events, from)
    for (const at of this.#changes) if (at >= from) queueMicrotask(() => events.changed(at))
    return { cancel: () => this.#watches.delete(events) }
  }
  async storeLimit(_line: string, limit: number) {
    this.#change(() => {
      this.limit = limit
    })
  }
  async remove(entry: PermitEntry) {
    if (!(await this.read(entry))) return false
    this.#change(() => this.entries.delete(entry.name))
    return true
  }
  async removeNames(names: readonly string[]) {
    for (const name of names) this.#change(() => this.entries.delete(name))
  }
  goneReason() {
    return 'its entry is gone'
  }
  async close() {}
  /** A write at a new position, told to every watch (asynchronously, as a store's events come). */
  #change(write: () => void) {
    write()
    const at = ++this.position
    this.#changes.push(at)
    for (const events of this.#watches.keys()) queueMicrotask(() => events.changed(at))
  }
  /** Someone else's write under the semaphore's prefix (another semaphore's client, say). */
  touch() {
    this.#change(() => {})
  }
}

const open = () => new AbortController().signal
const request = (owner: string, permits = 1): AcquireRequest => ({
  key: 'farm',
  owner,
  ttlMs: 3000,
  semaphore: { limit: 1, permits },
})

/** Whether `promise` has settled once the pending replies and events ran. */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false
  promise.then(
    () => {
      done = true
    },
    () => {
      done = true
    },
  )
  for (let i = 0; i < 10; i++) await settle()
  return done
}

describe('queue engine: semaphore waiting', () => {
  it('shares one watch among the waiters of one client, and wakes them on a change', async () => {
    const line = new FakeLine()
    const engine = new QueueSemaphore(line, new FakeQueueStore(), 'fake')
    const holder = (await engine.attempt(request('a'), open())) as Grant
    assert.equal(holder.granted, true)
    assert.equal((await engine.attempt(request('b'), open())).granted, false)
    assert.equal((await engine.attempt(request('c'), open())).granted, false)
    // c's entry came after b's read: b reads again (as the core does before it waits).
    assert.equal((await engine.attempt(request('b'), open())).granted, false)
    const waits = [engine.wait(request('b'), open()), engine.wait(request('c'), open())]
    assert.equal(await settled(Promise.race(waits)), false, 'nothing changed: they wait')
    assert.equal(line.watchesMade, 1, 'one watch for two waiters')
    await engine.release(holder.cookie as PermitAcquisition<number>, open())
    assert.equal(await settled(Promise.all(waits)), true, 'the release woke both')
    await engine.close()
  })

  it('wakes a waiter at once when the line changed between its read and its wait', async () => {
    const line = new FakeLine()
    const engine = new QueueSemaphore(line, new FakeQueueStore(), 'fake')
    await engine.attempt(request('a'), open())
    assert.equal((await engine.attempt(request('b'), open())).granted, false)
    // The watch is in place (b waits), then b reads again, as the core does right after arming its wait.
    const first = awaitLater(engine.wait(request('b'), open()))
    assert.equal((await engine.attempt(request('b'), open())).granted, false)
    line.touch()
    assert.equal(await settled(first), true)
    // Read again, then a change before the next wait: that wait must not sleep through it.
    assert.equal((await engine.attempt(request('b'), open())).granted, false)
    line.touch()
    await settle()
    assert.equal(await settled(engine.wait(request('b'), open())), true, 'the change after the read wakes it')
    // And with no change since its read, it waits.
    assert.equal((await engine.attempt(request('b'), open())).granted, false)
    assert.equal(await settled(engine.wait(request('b'), open())), false)
    await engine.close()
  })
})
