/**
 * The file backend's hot path (issue 17): what a process remembers between its own transitions, and what
 * must still send it back to the disk. An acquire after this process's own write succeeds that write
 * without listing or reading the folder, after one stat that the very file is still in place; new keys
 * start their fence range with the epoch this process took last while nothing was issued since; epoch
 * bumps start from the last epoch seen; the wake-up hint ignores events that are no news. Each test here
 * fails without the check it names. Real folders, a real second process where one is needed; no mocks.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { bumpEpoch, type EpochSource, RANGE, type SeenEpoch } from '../../../src/backends/file/epochs.js'
import {
  afterLink,
  createGeneration,
  Flush,
  genName,
  keyFolderName,
} from '../../../src/backends/file/generations.js'
import { bootId, monotonicMs } from '../../../src/backends/file/host-clock.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { newRecord, type RecordV1, readCurrent } from '../../../src/backends/file/mutex/records.js'
import { folderChanged, isNews } from '../../../src/backends/file/watch.js'
import { createLockClient } from '../../../src/index.js'
import { runScript } from '../../support/processes.js'
import { standingClock } from '../../support/standing-clock.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'

const CONTENDER = fileURLToPath(new URL('../../fixtures/contender.js', import.meta.url))
const dir = tempDir('file-hot-path')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const key = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
const client = (root: string) => createLockClient(fileBackend({ dir: root }), { ttl: '30s', renew: false })

/** The record generation `gen` of `folder` holds, and its stamp (as a read takes them). */
async function stateOf(folder: string) {
  const current = await readCurrent(folder)
  assert.ok(current.record !== 'none' && current.record !== 'unreadable', `no readable record in ${folder}`)
  return current
}

/** A record another process could have written after `record`, in the same range (same base). */
const successor = (record: RecordV1, fields: Partial<Parameters<typeof newRecord>[0]>, gen: bigint) =>
  newRecord(
    {
      key: record.key,
      state: 'free',
      owner: null,
      base: BigInt(record.base ?? '0'),
      fence: BigInt(record.base ?? '0') + gen,
      deadline: 0,
      ...fields,
    },
    bootId(),
  )

describe('file backend: the state this process wrote last', () => {
  it('an acquire that finds a successor of its own last write (still in place) takes the key in the same attempt', async () => {
    const root = newRoot()
    const k = key('moved-on')
    const folder = join(root, keyFolderName(k))
    const a = client(root)
    await (await a.acquire(k)).release()
    // Another process takes and releases the key: generation N+1 is linked, and N is not collected yet
    // (that writer is still between its link and its collection).
    const last = await stateOf(folder)
    const next = last.gen + 1n
    const theirs = successor(last.record, {}, next)
    assert.ok(await createGeneration(folder, next, theirs, undefined, last.stamp))
    // Our link of N+1 fails (EEXIST): the attempt must read the folder and succeed N+1, not report "held"
    // (a one-attempt tryAcquire would then fail, and a waiting acquire would wait for a change that came).
    const lock = await a.tryAcquire(k)
    assert.ok(lock, 'the key is free: the attempt should have taken it')
    assert.ok(lock.fence > BigInt(theirs.fence), `fence ${lock.fence} after ${theirs.fence}`)
    await lock.release()
    await a.close()
  })

  it('a folder removed, made again and advanced to the same generation is read, not succeeded', async () => {
    const root = newRoot()
    const k = key('same-gen')
    const folder = join(root, keyFolderName(k))
    const a = client(root)
    await (await a.acquire(k)).release()
    const ours = await stateOf(folder)
    rmSync(folder, { recursive: true })
    // A later mtime tick: a new file under the same name, even where the inode number is reused.
    await sleep(30)
    mkdirSync(folder)
    // Another process's folder: generations 1..N, the last one held by it, alive.
    const owner = randomBytes(16).toString('hex')
    for (let g = 1n; g <= ours.gen; g++) {
      const held = g === ours.gen
      const record = successor(
        ours.record,
        held ? { state: 'held', owner, deadline: monotonicMs() + 60_000 } : {},
        g,
      )
      const before = g === 1n ? undefined : (await stateOf(folder)).stamp
      assert.ok(await createGeneration(folder, g, record, undefined, before))
    }
    // Our last write is gone even though its name is back: the attempt must find the other holder.
    assert.equal(await a.tryAcquire(k), null, "another process's live lease was taken")
    assert.equal((await a.inspect(k)).owner, owner)
    await a.close()
  })
})

describe('file backend: the check after a link', () => {
  it('a generation already succeeded stays in place; only one whose predecessor vanished is removed', () => {
    // A release links N+1 and a waiter, reading it at once, links N+2 before the releaser lists the
    // folder: removing N+1 would make the waiter find its predecessor gone and stand back too, and the
    // key would stay with the released holder's record until its ttl.
    assert.equal(afterLink([genName(7n), genName(8n), genName(9n)], 8n, true), 'superseded')
    assert.equal(afterLink([genName(8n), genName(9n)], 9n, true), 'stands')
    assert.equal(afterLink([genName(9n)], 9n, true), 'orphaned')
    assert.equal(afterLink([genName(1n)], 1n, false), 'stands')
  })
})

describe('file backend: epochs for new keys', () => {
  it('new keys share the epoch this process took last, while .epoch still ends with it', async () => {
    const root = newRoot()
    // A wall clock that stands still (but for the waits of bumps): new epochs would not follow it.
    const a = createLockClient(fileBackend({ dir: root }, standingClock(1_000_000)), { ttl: '30s' })
    const fences: bigint[] = []
    for (let i = 0; i < 5; i++) {
      const lock = await a.acquire(key('new'))
      fences.push(lock.fence)
      await lock.release()
    }
    assert.equal(new Set(fences).size, 1, `one epoch, the first fence of its range: ${fences.join(', ')}`)
    assert.equal(fences[0]! % RANGE, 1n)
    await a.close()
  })

  it('takes a new epoch for a new key once another process issued one since', async () => {
    const root = newRoot()
    const k = key('recreated')
    const a = client(root)
    // This process takes an epoch, for another key.
    await (await a.acquire(key('first'))).release()
    // Another process starts `k` with a newer epoch, and its folder is removed afterwards (by that
    // process's own retire at its close, or here).
    const log = join(dir.path, `log-${randomBytes(3).toString('hex')}`)
    const marker = join(dir.path, `inside-${randomBytes(3).toString('hex')}`)
    const code = await runScript(CONTENDER, [pathToFileURL(root).href, k, '1', log, marker])
    assert.equal(code, 0)
    const theirs = BigInt(readFileSync(log, 'utf8').trim().split(' ')[0]!)
    rmSync(join(root, keyFolderName(k)), { recursive: true, force: true })
    // Our epoch is below theirs: starting `k` again with it would give a lower fence.
    const lock = await a.acquire(k)
    assert.ok(lock.fence > theirs, `fence ${lock.fence} after ${theirs}, granted by the other process`)
    await lock.release()
    await a.close()
  })

  it('a bump that starts from an epoch seen long ago still issues one above every epoch issued since', async () => {
    const root = newRoot()
    const clock = standingClock(1000)
    const source = (seen: SeenEpoch): EpochSource => ({
      dir: root,
      durability: 'none',
      boot: bootId(),
      flush: new Flush(),
      ...clock,
      seen,
    })
    const behind: SeenEpoch = { latest: 0n, list: true }
    const first = await bumpEpoch(source(behind), 0n)
    // Another process bumps on: every epoch it issued below its last one is collected, so the name right
    // above ours is free again, and a link there succeeds.
    const other: SeenEpoch = { latest: 0n, list: true }
    let top = first
    for (let i = 0; i < 5; i++) top = await bumpEpoch(source(other), 0n)
    assert.ok(top > first + 1n)
    const next = await bumpEpoch(source(behind), 0n)
    assert.ok(next > top, `epoch ${next} issued after ${top}`)
  })
})

describe('file backend: the wake-up hint', () => {
  it('names that are no news: temp files, generations read already; news: a new generation, the folder itself', () => {
    assert.equal(isNews('.tmp-0123456789abcdef-1', 5n), false)
    assert.equal(isNews(genName(5n), 5n), false)
    assert.equal(isNews(genName(4n), 5n), false)
    assert.equal(isNews(genName(6n), 5n), true)
    assert.equal(isNews(genName(1n), undefined), true)
    assert.equal(isNews('key~0123', 5n), true)
    assert.equal(isNews(null, 5n), true)
  })

  it('sleeps through what other writers do without changing the state, and wakes on a new generation', async () => {
    const folder = join(newRoot(), 'k~hint')
    mkdirSync(folder, { recursive: true })
    const record = (gen: bigint) => successor({ key: 'k', base: '0' } as RecordV1, {}, gen)
    assert.ok(await createGeneration(folder, 1n, record(1n), undefined))
    assert.ok(await createGeneration(folder, 2n, record(2n), undefined, (await stateOf(folder)).stamp))
    const stop = new AbortController()
    let woken = false
    const hint = folderChanged(folder, stop.signal, () => 2n).then(() => {
      woken = true
    })
    // A writer's temp file, written and removed; the record read (its atime); an old generation collected.
    writeFileSync(join(folder, '.tmp-another-writer-1'), '{}')
    unlinkSync(join(folder, '.tmp-another-writer-1'))
    readFileSync(join(folder, genName(2n)))
    unlinkSync(join(folder, genName(1n)))
    await sleep(200)
    assert.equal(woken, false, 'the hint fired on no news')
    assert.ok(await createGeneration(folder, 3n, record(3n), undefined, (await stateOf(folder)).stamp))
    await waitUntil(() => woken, 'the hint to fire on generation 3')
    stop.abort()
    await hint
  })
})
