/**
 * The file backend's read-write locks (src/backends/file/rwlock/), what is particular to the store: the
 * layout (a record per lock in `.rwlocks/`, apart from locks and semaphores), deadlines on the host's
 * monotonic clock, a record of another boot holding nothing (its read epoch not reused), fences above
 * every earlier one after an idle lock's folder was retired, and a holder whose process died freeing the
 * lock at once. Real folders and processes; no mocks.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { genName, highest, keyFolderName } from '../../../src/backends/file/generations.js'
import { monotonicMs } from '../../../src/backends/file/host-clock.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import type { RwLockRecord } from '../../../src/backends/file/rwlock/records.js'
import { createLockClient } from '../../../src/index.js'
import { standingClock } from '../../support/standing-clock.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'

const dir = tempDir('file-rwlock')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const name = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
const rwlocks = (root: string) => join(root, '.rwlocks')
/** The read-write lock folders of a lock root. */
const rwlockFolders = (root: string) => readdirSync(rwlocks(root)).filter((n) => n.includes('~'))

/** The record of read-write lock `key` as its highest generation holds it. */
function recordOf(root: string, key: string): RwLockRecord {
  const folder = join(rwlocks(root), keyFolderName(key))
  const gen = highest(readdirSync(folder))
  return JSON.parse(readFileSync(join(folder, genName(gen)), 'utf8')) as RwLockRecord
}

/** Waits, up to `ms`, for `done()`; whether it came true. */
async function eventually(done: () => boolean, ms: number): Promise<boolean> {
  for (const end = performance.now() + ms; performance.now() < end; await sleep(20)) if (done()) return true
  return done()
}

describe('file backend: read-write locks', () => {
  it('keeps a read-write lock as one record in .rwlocks/, apart from a lock of the same name', async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const client = createLockClient(backend, { ttl: '20s' })
    const key = name('shared-name')
    const lock = await client.acquire(key)
    const r1 = await client.rwlock(key).read()
    const r2 = await client.rwlock(key).read()
    assert.deepEqual(rwlockFolders(root), [keyFolderName(key)])
    const record = recordOf(root, key)
    assert.equal(record.kind, 'rwlock')
    assert.equal(record.key, key)
    assert.deepEqual(
      record.line.map((e) => [e.owner, e.mode, e.fence]),
      [
        [r1.owner, 'read', r1.fence.toString()],
        [r2.owner, 'read', r2.fence.toString()],
      ],
    )
    assert.equal(r1.fence, r2.fence, 'readers of one epoch share its fence')
    // The deadline is on the host's monotonic clock (ms since boot), not the wall clock.
    const left = record.line[0]!.deadline - monotonicMs()
    assert.ok(left > 0 && left <= 20_000, `the lease ends ${left} ms from now on the monotonic clock`)
    // The locks' list and the read-write lock are apart: only the lock is listed.
    const listed = []
    for await (const held of backend.list?.('', new AbortController().signal) ?? []) listed.push(held.key)
    assert.deepEqual(listed, [key])
    await r1.release()
    await r2.release()
    await lock.release()
    await client.close()
  })

  it('a record of another boot holds nothing, and the next fences are still greater', async () => {
    const root = newRoot()
    const key = name('boot')
    const before = createLockClient(
      fileBackend({ dir: root }, { bootId: 'test-boot-a', ...standingClock(1_000_000) }),
      { ttl: '60s' },
    )
    const old = await before.rwlock(key).read()
    const now = createLockClient(
      fileBackend({ dir: root }, { bootId: 'test-boot-b', ...standingClock(1_000_000) }),
      { ttl: '60s' },
    )
    // Its lease of 60 s was granted in a boot that has ended: a writer is admitted (well within 60 s).
    const w = await now.rwlock(key).write({ timeout: '30s' })
    assert.ok(w.fence > old.fence, `writer fence ${w.fence} after ${old.fence}`)
    await w.release()
    const r = await now.rwlock(key).read()
    assert.ok(r.fence > w.fence, `reader fence ${r.fence} after the writer's ${w.fence}`)
    await r.release()
    await now.close()
    await before.close().catch(() => {})
  })

  it('an idle read-write lock leaves no folder, and its next fence is greater than every earlier one', async () => {
    const root = newRoot()
    const key = name('retired')
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 0 }), { ttl: '20s' })
    const w = await client.rwlock(key).write()
    await w.release()
    assert.ok(await eventually(() => rwlockFolders(root).length === 0, 10_000), 'the folder is retired')
    const r = await client.rwlock(key).read()
    assert.ok(r.fence > w.fence, `reader fence ${r.fence} after ${w.fence}`)
    await r.release()
    await client.close()
  })

  it('a reader whose process died frees the lock for a writer at once, not after its lease', async () => {
    const root = newRoot()
    const key = name('dead-reader')
    // A process of the host that holds the read lease, then dies without releasing it.
    const holder = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' })
    const exited = once(holder, 'exit')
    try {
      const dead = createLockClient(fileBackend({ dir: root, holderPids: [holder.pid!] }), {
        ttl: '120s',
        renew: false,
      })
      await dead.rwlock(key).read()
      holder.kill('SIGKILL')
      await exited
      const live = createLockClient(fileBackend({ dir: root }), { ttl: '20s' })
      // Far below the 120 s lease: only the dead process can have freed it.
      const w = await live.rwlock(key).write({ timeout: '60s' })
      await w.release()
      await live.close()
      await dead.close().catch(() => {})
    } finally {
      holder.kill('SIGKILL')
    }
  })
})
