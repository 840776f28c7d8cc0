import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import {
  bumpEpoch,
  currentEpoch,
  type Durability,
  EPOCH_FOLDER,
  type EpochSource,
  RANGE,
} from '../../../src/backends/file/epochs.js'
import {
  collect,
  createGeneration,
  Flush,
  genName,
  keyFolderName,
  Pending,
} from '../../../src/backends/file/generations.js'
import { bootId, monotonicMs } from '../../../src/backends/file/host-clock.js'
import { fileBackend, fromUrl } from '../../../src/backends/file/index.js'
import { type RecordV1, readCurrent } from '../../../src/backends/file/mutex/records.js'
import { createLockClient } from '../../../src/index.js'
import { standingClock } from '../../support/standing-clock.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'

const dir = tempDir('file-records')
after(() => dir.cleanup())

/** An epoch source on `dir`, as a backend's root is one. */
const source = (dir: string, durability: Durability = 'none', startMs?: number): EpochSource => ({
  dir,
  durability,
  boot: bootId(),
  flush: new Flush(),
  ...(startMs === undefined ? {} : standingClock(startMs)),
})

const record = (over: Partial<RecordV1> = {}): RecordV1 => ({
  v: 1,
  key: 'k',
  state: 'held',
  owner: randomBytes(16).toString('hex'),
  fence: '1',
  boot: bootId(),
  deadline: monotonicMs() + 60_000,
  ...over,
})

/** The stamp of a folder's current generation, as a writer's read takes it. */
const stampOf = async (f: string) => {
  const current = await readCurrent(f)
  assert.ok(current.record !== 'none', `no generation in ${f}`)
  return current.stamp
}

const folder = () => {
  const path = join(dir.path, randomBytes(4).toString('hex'))
  mkdirSync(path, { recursive: true })
  return path
}

describe('generation files (the atomic step)', () => {
  it('exactly one of many concurrent creators of generation N+1 wins', async () => {
    const f = folder()
    for (let round = 1n; round <= 5n; round++) {
      const results = await Promise.all(
        Array.from({ length: 20 }, () => createGeneration(f, round, record(), undefined)),
      )
      assert.equal(
        results.filter(Boolean).length,
        1,
        `round ${round}: ${results.filter(Boolean).length} winners`,
      )
    }
    assert.equal((await readCurrent(f)).gen, 5n)
  })

  it('refuses a stale writer whose generation was created, superseded and collected (ABA)', async () => {
    const f = folder()
    assert.ok(await createGeneration(f, 1n, record(), undefined))
    assert.ok(await createGeneration(f, 2n, record({ state: 'free' }), undefined))
    await collect(f, 2n, readdirSync(f))
    assert.equal(existsSync(join(f, genName(1n))), false, 'generation 1 should have been collected')
    // A writer that read state 0 long ago now links generation 1: the name is free again, link() succeeds,
    // and only the check for a higher generation stops a second grant.
    assert.equal(await createGeneration(f, 1n, record(), undefined), false)
    // It stays below the highest, where nobody reads it (see `afterLink`), until a transition collects it.
    const current = await readCurrent(f)
    assert.equal(current.gen, 2n)
    assert.ok(await createGeneration(f, 3n, record({ state: 'free' }), undefined, current.stamp))
    collect(f, 3n, readdirSync(f))
    assert.equal(existsSync(join(f, genName(1n))), false, 'the stale generation must be collected')
  })

  it('never collects the highest generation, nor a fresh temp file', async () => {
    const f = folder()
    for (let g = 1n; g <= 4n; g++) assert.ok(await createGeneration(f, g, record(), undefined))
    writeFileSync(join(f, '.tmp-inflight'), '{')
    await collect(f, 4n, readdirSync(f))
    assert.deepEqual(readdirSync(f).sort(), ['.tmp-inflight', genName(4n)].sort())
  })
})

describe('removals and epochs (the atomic steps)', () => {
  it('a pending record pins its folder: removing the folder makes the link fail, never land elsewhere', async () => {
    const f = folder()
    const pending = new Pending(f)
    await pending.write(record(), undefined)
    // rmdir alone cannot remove a folder that holds the temp file.
    assert.throws(() => rmdirSync(f), /ENOTEMPTY/)
    // rm -rf removes the temp file first; a new folder at the same path has no such file.
    rmSync(f, { recursive: true, force: true })
    mkdirSync(f)
    assert.equal(await pending.commit(1n, undefined), false)
    assert.deepEqual(readdirSync(f), [], 'nothing may land in the new folder')
  })

  it('refuses a writer whose state was removed with its folder, even when the new folder reached the same generation', async () => {
    const f = folder()
    assert.ok(await createGeneration(f, 1n, record(), undefined))
    assert.ok(await createGeneration(f, 2n, record({ state: 'free' }), undefined, await stampOf(f)))
    const stale = await stampOf(f)
    // The folder is removed and recreated, and advances to generation 2 again (a later mtime tick).
    rmSync(f, { recursive: true, force: true })
    await sleep(30)
    mkdirSync(f)
    assert.ok(await createGeneration(f, 1n, record(), undefined))
    assert.ok(await createGeneration(f, 2n, record(), undefined, await stampOf(f)))
    // The stale writer links generation 3 after the state it read: refused, the new folder untouched.
    assert.equal(await createGeneration(f, 3n, record(), undefined, stale), false)
    assert.equal((await readCurrent(f)).gen, 2n)
    assert.equal(existsSync(join(f, genName(3n))), false)
  })

  it('refuses a writer whose predecessor was deleted behind its back (no successor, files removed)', async () => {
    const f = folder()
    assert.ok(await createGeneration(f, 1n, record(), undefined))
    const read = await stampOf(f)
    rmSync(join(f, genName(1n)))
    assert.equal(await createGeneration(f, 2n, record(), undefined, read), false)
    assert.deepEqual(readdirSync(f), [])
  })

  it('issues each epoch once, above every earlier one, however many bump at once', async () => {
    const root = folder()
    const epochs = await Promise.all(Array.from({ length: 30 }, () => bumpEpoch(source(root, 'acquire'), 0n)))
    assert.equal(new Set(epochs).size, epochs.length, `epochs issued twice: ${epochs.join(', ')}`)
    const top = epochs.reduce((a, b) => (a > b ? a : b))
    assert.equal(currentEpoch(root), top)
    assert.ok((await bumpEpoch(source(root), 0n)) > top)
    assert.ok((await bumpEpoch(source(root), 1000n)) > 1000n, 'a floor is respected')
    const names = readdirSync(join(root, EPOCH_FOLDER)).filter((n) => /^\d+$/.test(n))
    assert.ok(names.length <= 2, `old epochs are collected: ${names.join(', ')}`)
  })

  it('starts epochs at the wall clock, so fences rise even when the whole lock root is lost (tmpfs, reboot)', async () => {
    const root = folder()
    assert.ok(
      (await bumpEpoch(source(root, 'none', 5000), 0n)) === 5000n,
      'an empty root starts at the clock',
    )
    assert.equal(await bumpEpoch(source(root, 'none', 4000), 0n), 5001n, 'never below an epoch issued before')
    rmSync(join(root, EPOCH_FOLDER), { recursive: true })
    assert.equal(
      await bumpEpoch(source(root, 'none', 9000), 0n),
      9000n,
      'a lost counter restarts at the clock',
    )
    // The same through the backend: remove the whole root between two grants, as a reboot clears tmpfs.
    const lost = folder()
    const client = createLockClient(fileBackend({ dir: lost }), { ttl: '5s' })
    const first = await client.acquire('reboot')
    await first.release()
    rmSync(lost, { recursive: true })
    await sleep(5)
    const second = await client.acquire('reboot')
    assert.ok(
      second.fence > first.fence,
      `fence ${second.fence} after a lost root is not above ${first.fence}`,
    )
    await second.release()
    await client.close()
  })

  it('a holder whose newest record was removed by hand loses the lock, even if the next grant repeats its number', async () => {
    const root = folder()
    const key = 'rolled-back'
    const f = join(root, keyFolderName(key))
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '30s', renew: false })
    const b = createLockClient(fileBackend({ dir: root }), { ttl: '30s', renew: false })
    await (await a.acquire(key)).release()
    // Keep the free record, which the next transition collects (in a shared folder, the sticky bit keeps
    // another user's), then put it back under the held one and remove the held one.
    const [freeName] = readdirSync(f).filter((n) => /^\d+$/.test(n))
    const freeRecord = readFileSync(join(f, freeName!))
    const held = await a.acquire(key)
    const [heldName] = readdirSync(f).filter((n) => /^\d+$/.test(n))
    writeFileSync(join(f, freeName!), freeRecord)
    rmSync(join(f, heldName!))
    const second = await b.acquire(key, { timeout: 0 })
    await assert.rejects(held.extend(), (error: Error) => error.name === 'LockLostError')
    assert.equal(held.signal.aborted, true)
    assert.equal((await b.inspect(key)).owner, second.owner, "the old holder's renewal did not take it over")
    await second.release()
    await Promise.all([a.close(), b.close()])
  })

  it('takes a new epoch when a fence range is used up (2^21 generations)', async () => {
    const root = folder()
    const key = 'rollover'
    const f = join(root, keyFolderName(key))
    mkdirSync(f)
    // Generation 5 holds the last fence of epoch 0's range: the next generation's would leave it.
    const base = RANGE - 6n
    writeFileSync(
      join(f, genName(5n)),
      JSON.stringify(record({ key, state: 'free', fence: (base + 5n).toString(), base: base.toString() })),
    )
    const client = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    const lock = await client.acquire(key)
    assert.ok(lock.fence > base + 5n, `${lock.fence}`)
    assert.equal(lock.fence % RANGE, 1n, 'the first fence of a new range')
    await lock.extend()
    await lock.release()
    const next = await client.acquire(key)
    assert.equal(next.fence, lock.fence + 3n, 'extend and release go on in the new range')
    await next.release()
    await client.close()
  })

  it("abandon frees only what the given owner holds, and never a new folder's record of the same generation", async () => {
    const root = folder()
    const backend = fileBackend({ dir: root })
    const signal = AbortSignal.timeout(10_000)
    const req = { key: 'abandoned', owner: randomBytes(16).toString('hex'), ttlMs: 30_000 }
    const grant = await backend.tryAcquire(req, signal)
    assert.ok(grant.granted)
    await backend.abandon({ ...req, owner: randomBytes(16).toString('hex') }, signal)
    assert.equal(
      (await backend.inspect(req.key, signal))?.held,
      true,
      "another owner's abandon must not free it",
    )
    await backend.abandon(req, signal)
    const info = await backend.inspect(req.key, signal)
    assert.equal(info?.held, false)
    assert.equal(info?.fence, grant.fence)
    // The same owner's record at generation 1 of the old folder; a new folder's generation 1 is someone else's.
    const again = await backend.tryAcquire(req, signal)
    assert.ok(again.granted)
    rmSync(join(root, keyFolderName(req.key)), { recursive: true })
    const other = { ...req, owner: randomBytes(16).toString('hex') }
    const theirs = await backend.tryAcquire(other, signal)
    assert.ok(theirs.granted)
    await backend.abandon(req, signal)
    assert.equal((await backend.inspect(req.key, signal))?.owner, other.owner)
    assert.equal(await backend.release({ ...req, fence: again.fence, cookie: again.cookie }, signal), false)
    assert.equal((await backend.inspect(req.key, signal))?.owner, other.owner)
  })
})

describe('file backend records', () => {
  const locksDir = join(dir.path, 'locks')
  const client = (opts: Parameters<typeof fileBackend>[0] | undefined = undefined) =>
    createLockClient(fileBackend(opts ?? { dir: locksDir }), { ttl: '5s' })
  const folderOf = (key: string) => join(locksDir, keyFolderName(key))

  it('treats an unreadable record as held, says so in inspect, and takes over after unreadableHoldMs', async () => {
    const key = `corrupt-${randomBytes(3).toString('hex')}`
    const a = client({ dir: locksDir, unreadableHoldMs: 400 })
    const first = await a.acquire(key)
    await first.release()
    const current = await readCurrent(folderOf(key))
    writeFileSync(join(folderOf(key), genName(current.gen + 1n)), '{"v":1,"state":"he')
    const info = await a.inspect(key)
    assert.equal(info.held, true)
    assert.match(info.note ?? '', /unreadable/)
    assert.equal(await a.tryAcquire(key), null, 'an unreadable record must count as held')
    const lock = await a.acquire(key, { timeout: '10s' })
    assert.ok(lock.fence > current.gen + 1n, 'the fence must pass the unreadable generation')
    await lock.release()
    await a.close()
  })

  it('treats a record from a newer format version as unreadable, never as free', async () => {
    const key = `future-${randomBytes(3).toString('hex')}`
    mkdirSync(folderOf(key), { recursive: true })
    writeFileSync(join(folderOf(key), genName(1n)), JSON.stringify({ ...record(), v: 2 }))
    const a = client()
    assert.equal(await a.tryAcquire(key), null)
    await a.close()
  })

  it('ignores half-written temp files', async () => {
    const key = `tmp-${randomBytes(3).toString('hex')}`
    mkdirSync(folderOf(key), { recursive: true })
    writeFileSync(join(folderOf(key), '.tmp-crashed-writer'), '{"v":1,')
    const a = client()
    const lock = await a.tryAcquire(key)
    assert.ok(lock)
    await lock.release()
    await a.close()
  })

  it('treats a lease from another boot as expired', async () => {
    const key = `boot-${randomBytes(3).toString('hex')}`
    mkdirSync(folderOf(key), { recursive: true })
    writeFileSync(
      join(folderOf(key), genName(7n)),
      JSON.stringify(record({ key, boot: 'an-earlier-boot', fence: '7' })),
    )
    const a = client()
    const lock = await a.tryAcquire(key)
    assert.ok(lock, 'a lease from another boot must not block')
    // A record from another boot starts a new epoch: that boot may have granted more than the disk kept.
    assert.ok(lock.fence > 7n, `fence ${lock.fence}`)
    await lock.release()
    await a.close()
  })

  it('keeps at most a couple of generation files per key however many cycles run', async () => {
    const key = `gc-${randomBytes(3).toString('hex')}`
    const a = client()
    for (let i = 0; i < 40; i++) {
      const lock = await a.acquire(key)
      await lock.extend()
      await lock.release()
    }
    const gens = readdirSync(folderOf(key)).filter((n) => /^\d+$/.test(n))
    assert.ok(gens.length <= 2, `left ${gens.length} generation files`)
    assert.equal(readdirSync(folderOf(key)).filter((n) => n.startsWith('.tmp-')).length, 0)
    await a.close()
  })

  it('maps every key to its own folder name, bounded in length', () => {
    const names = ['Key', 'key', 'a/b', 'a_b', 'a\\b', '..', `${'z'.repeat(5000)}`, '鍵']
    const folders = names.map(keyFolderName)
    assert.equal(new Set(folders).size, names.length)
    for (const f of folders) {
      assert.ok(f.length <= 80, f)
      assert.match(f, /^[a-z0-9._-]*~[0-9a-f]{32}$/)
    }
  })

  it('parses file URLs and refuses remote hosts and bad parameters', () => {
    const url = pathToFileURL(locksDir)
    assert.equal(fromUrl(url).id, `file://${locksDir}`)
    assert.throws(() => fromUrl(new URL('file://server/share')), /local file URL/)
    assert.throws(() => fromUrl(new URL(`${url.href}?fsync=maybe`)), /`fsync`.*true or false/)
    assert.throws(() => fileBackend({ dir: '' }), TypeError)
  })
})
