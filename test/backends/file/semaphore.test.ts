/**
 * The file backend's semaphores (src/backends/file/semaphore/), what is particular to the store: the
 * layout (a record per semaphore in `.semaphores/`, apart from locks), deadlines on the host's monotonic
 * clock and a record of another boot holding nothing, the sequence after an idle semaphore's folder was
 * retired, the line a waiter keeps only while it asks, and several processes of the host sharing one
 * semaphore. Real folders and processes; no mocks.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdirSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { genName, highest, keyFolderName } from '../../../src/backends/file/generations.js'
import { monotonicMs } from '../../../src/backends/file/host-clock.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import type { SemaphoreRecord } from '../../../src/backends/file/semaphore/records.js'
import type { AcquireRequest, SemaphoreFacet } from '../../../src/core/backend.js'
import { createLockClient } from '../../../src/index.js'
import { runScript } from '../../support/processes.js'
import { standingClock } from '../../support/standing-clock.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'

const TAKER = fileURLToPath(new URL('../../fixtures/permit-taker.js', import.meta.url))

const dir = tempDir('file-semaphore')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const name = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
const semaphores = (root: string) => join(root, '.semaphores')
/** The semaphore folders of a lock root. */
const semaphoreFolders = (root: string) => readdirSync(semaphores(root)).filter((n) => n.includes('~'))

/** The record of semaphore `key` as its highest generation holds it. */
function recordOf(root: string, key: string): SemaphoreRecord {
  const folder = join(semaphores(root), keyFolderName(key))
  const gen = highest(readdirSync(folder))
  return JSON.parse(readFileSync(join(folder, genName(gen)), 'utf8')) as SemaphoreRecord
}

/** Waits, up to `ms`, for `done()`; whether it came true. */
async function eventually(done: () => boolean, ms: number): Promise<boolean> {
  for (const end = performance.now() + ms; performance.now() < end; await sleep(20)) if (done()) return true
  return done()
}

/** An attempt of the facet, as the core makes it. */
const attempt = (key: string, owner: string, limit: number, ttlMs = 1000): AcquireRequest => ({
  key,
  owner,
  ttlMs,
  semaphore: { limit, permits: 1 },
})

describe('file backend: semaphores', () => {
  it('keeps a semaphore as one record in .semaphores/, apart from a lock of the same name', async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const client = createLockClient(backend, { ttl: '20s' })
    const key = name('shared-name')
    const lock = await client.acquire(key)
    const permits = await client.semaphore(key, { limit: 2 }).acquire()
    assert.deepEqual(semaphoreFolders(root), [keyFolderName(key)])
    const record = recordOf(root, key)
    assert.equal(record.kind, 'semaphore')
    assert.equal(record.key, key)
    assert.equal(record.limit, 2)
    assert.deepEqual(
      record.leases.map((l) => [l.owner, l.permits, l.sequence]),
      [[permits.owner, 1, permits.sequence.toString()]],
    )
    // The deadline is on the host's monotonic clock (ms since boot), not the wall clock.
    const left = record.leases[0]!.deadline - monotonicMs()
    assert.ok(left > 0 && left <= 20_000, `the lease ends ${left} ms from now on the monotonic clock`)
    // The locks' list and the semaphore are apart: only the lock is listed, and both are held.
    const listed = []
    for await (const held of backend.list?.('', new AbortController().signal) ?? []) listed.push(held.key)
    assert.deepEqual(listed, [key])
    assert.equal((await client.inspect(key))?.held, true)
    await permits.release()
    await lock.release()
    await client.close()
  })

  it('a record of another boot holds nothing, and the next sequence is still greater', async () => {
    const root = newRoot()
    const key = name('boot')
    const before = createLockClient(
      fileBackend({ dir: root }, { bootId: 'test-boot-a', ...standingClock(1_000_000) }),
      { ttl: '60s' },
    )
    const old = await before.semaphore(key, { limit: 1 }).acquire()
    const now = createLockClient(
      fileBackend({ dir: root }, { bootId: 'test-boot-b', ...standingClock(1_000_000) }),
      { ttl: '60s' },
    )
    // Its lease of 60 s was granted in a boot that has ended: the permit is free (the new boot's first
    // reservation is flushed first, so the grant takes more than an attempt's bound; not 60 s).
    const next = await now.semaphore(key, { limit: 1 }).acquire({ timeout: '30s' })
    assert.ok(next.sequence > old.sequence, `sequence ${next.sequence} after ${old.sequence}`)
    await next.release()
    await now.close()
    await before.close().catch(() => {})
  })

  it('an idle semaphore leaves no folder, and its next sequence is greater than every earlier one', async () => {
    const root = newRoot()
    const key = name('retired')
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 0 }), { ttl: '20s' })
    const sem = client.semaphore(key, { limit: 3 })
    const first = await sem.acquire()
    const second = await sem.acquire()
    await first.release()
    await second.release()
    assert.ok(await eventually(() => semaphoreFolders(root).length === 0, 10_000), 'the folder is retired')
    assert.equal(await sem.inspect().then((v) => v.held), 0)
    // Forgotten: another limit is stored by the next acquire.
    const third = await client.semaphore(key, { limit: 5 }).acquire()
    assert.ok(third.sequence > second.sequence, `sequence ${third.sequence} after ${second.sequence}`)
    await third.release()
    await client.close()
    assert.deepEqual(semaphoreFolders(root), [], 'closing retires it too')
  })

  it('a waiter keeps its place only while it asks: first in line until max(ttl, 3 s) without a word', async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const facet = backend.semaphore as SemaphoreFacet
    const key = name('line')
    const signal = new AbortController().signal
    const held = await facet.tryAcquire(attempt(key, 'holder', 1), signal)
    assert.ok(held.granted)
    // A waiter that asks once and then stops (a crashed process) without abandoning.
    const ghost = await facet.tryAcquire(attempt(key, 'ghost', 1), signal)
    assert.deepEqual([ghost.granted, !ghost.granted && ghost.queued], [false, true])
    assert.ok(await facet.release({ key, owner: 'holder', fence: held.fence, cookie: held.cookie }, signal))
    const queuedAt = performance.now()
    // The ghost is first in line: a later request waits behind it although the permit is free.
    const later = await facet.tryAcquire(attempt(key, 'later', 1), signal)
    assert.equal(later.granted, false, 'the line is kept: the ghost is ahead')
    assert.equal((await facet.holders(key, signal))?.waiting, 2)
    // Its place lapses after max(ttl, 3 s) without a word: then the next in line is served.
    await sleep(3000 - (performance.now() - queuedAt) + 200)
    const served = await facet.tryAcquire(attempt(key, 'later', 1), signal)
    assert.ok(served.granted, 'the lapsed place no longer blocks the line')
    assert.ok(served.fence > held.fence)
    await facet.release({ key, owner: 'later', fence: served.fence, cookie: served.cookie }, signal)
    await backend.close()
  })

  it('a semaphore whose leases all ended without a release is swept, and a live one is not', async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root }, { sweepAfterMs: 0, sweepEveryMs: 0, retireAfterMs: Infinity })
    const facet = backend.semaphore as SemaphoreFacet
    const signal = new AbortController().signal
    const [ended, live] = [name('ended'), name('live')]
    // A holder that never releases (a crashed one): its lease ends after 200 ms.
    assert.ok((await facet.tryAcquire(attempt(ended, 'crashed', 1, 200), signal)).granted)
    await sleep(400)
    // Any grant sweeps the root now and then: the ended semaphore's folder goes, the live one's stays.
    const held = await facet.tryAcquire(attempt(live, 'holder', 1, 60_000), signal)
    assert.ok(held.granted)
    assert.ok(
      await eventually(() => semaphoreFolders(root).length === 1, 10_000),
      `only the live semaphore is kept: ${semaphoreFolders(root)}`,
    )
    assert.deepEqual(semaphoreFolders(root), [keyFolderName(live)])
    assert.equal(await facet.holders(ended, signal), null)
    await facet.release({ key: live, owner: 'holder', fence: held.fence, cookie: held.cookie }, signal)
    await backend.close()
  })

  it(
    'processes of one host sharing a semaphore never hold more than its limit, with unique sequences',
    { timeout: 240_000 },
    async () => {
      const root = newRoot()
      const url = pathToFileURL(root).href
      const log = join(dir.path, `${randomBytes(4).toString('hex')}.log`)
      const slots = join(dir.path, `slots-${randomBytes(4).toString('hex')}`)
      mkdirSync(slots)
      const [processes, limit, iterations] = [6, 2, 5]
      const codes = await Promise.all(
        Array.from({ length: processes }, () =>
          runScript(TAKER, [url, 'shared', String(limit), String(iterations), log, slots]),
        ),
      )
      assert.deepEqual(codes, Array(processes).fill(0), 'every taker should finish cleanly')
      const lines = readFileSync(log, 'utf8').trim().split('\n')
      assert.deepEqual(
        lines.filter((l) => l.startsWith('OVER')),
        [],
        'a taker found every slot taken: more than `limit` permits were held',
      )
      assert.equal(lines.length, processes * iterations)
      const sequences = lines.map((l) => l.split(' ')[0])
      assert.equal(new Set(sequences).size, sequences.length, 'every sequence is unique')
      assert.equal(new Set(lines.map((l) => l.split(' ')[1])).size, processes, 'every process got permits')
    },
  )
})
