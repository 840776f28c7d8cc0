import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import {
  collect,
  createGeneration,
  genName,
  keyFolderName,
  type RecordV1,
  readCurrent,
} from '../../src/backends/file/generations.js'
import { bootId, monotonicMs } from '../../src/backends/file/host-clock.js'
import { fileBackend, fromUrl } from '../../src/backends/file/index.js'
import { createLockClient } from '../../src/index.js'
import { tempDir } from '../support/temp.js'

const dir = tempDir('file-records')
after(() => dir.cleanup())

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
        Array.from({ length: 20 }, () => createGeneration(f, round, record(), false)),
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
    assert.ok(await createGeneration(f, 1n, record(), false))
    assert.ok(await createGeneration(f, 2n, record({ state: 'free' }), false))
    await collect(f, 2n, readdirSync(f))
    assert.equal(existsSync(join(f, genName(1n))), false, 'generation 1 should have been collected')
    // A writer that read state 0 long ago now links generation 1: the name is free again, link() succeeds,
    // and only the check for a higher generation stops a second grant.
    assert.equal(await createGeneration(f, 1n, record(), false), false)
    assert.equal(existsSync(join(f, genName(1n))), false, 'the stale generation must be removed')
    const current = await readCurrent(f)
    assert.equal(current.gen, 2n)
  })

  it('never collects the highest generation, nor a fresh temp file', async () => {
    const f = folder()
    for (let g = 1n; g <= 4n; g++) assert.ok(await createGeneration(f, g, record(), false))
    writeFileSync(join(f, '.tmp-inflight'), '{')
    await collect(f, 4n, readdirSync(f))
    assert.deepEqual(readdirSync(f).sort(), ['.tmp-inflight', genName(4n)].sort())
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
    assert.equal(lock.fence, 8n)
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
