/**
 * The file backend's fences across removals (issue 11): a key's folder or files removed (by a tmp cleaner,
 * an operator) never lower its fence, a client that used the folder before recreates it, and removing
 * the whole lock root restarts epochs at the wall clock. Also its configuration errors and URL parameters. Real folders, real
 * `rm -rf`; no mocks.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { keyFolderName } from '../../../src/backends/file/generations.js'
import { fileBackend, fromUrl } from '../../../src/backends/file/index.js'
import { BackendUnavailableError, createLockClient, LockLostError } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'
import { abortedWithin } from '../../support/wait.js'

const dir = tempDir('file-fences')
after(() => dir.cleanup())

/** A lock root of its own per test, so removing one never touches another test's keys. */
const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const key = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
/** What a tmp cleaner or an operator does: the key's whole folder, gone. */
const removeKeyFolder = (root: string, k: string) =>
  rmSync(join(root, keyFolderName(k)), { recursive: true, force: true })

describe('file backend: fences survive removed key folders', () => {
  it('a key folder removed while free: the next grant has a greater fence', async () => {
    const root = newRoot()
    const k = key('free')
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    const first = await a.acquire(k)
    await first.release()
    removeKeyFolder(root, k)
    // A client that never saw the folder: nothing cached anywhere, only what is on disk.
    const b = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    const second = await b.acquire(k, { timeout: '3s' })
    assert.ok(second.fence > first.fence, `fence went from ${first.fence} to ${second.fence}`)
    await second.release()
    await Promise.all([a.close(), b.close()])
  })

  it("a key's generation files removed (the folder kept): the next grant has a greater fence", async () => {
    const root = newRoot()
    const k = key('files')
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    const first = await a.acquire(k)
    await first.release()
    const folder = join(root, keyFolderName(k))
    for (const name of readdirSync(folder)) unlinkSync(join(folder, name))
    const second = await a.acquire(k, { timeout: '3s' })
    assert.ok(second.fence > first.fence, `fence went from ${first.fence} to ${second.fence}`)
    await second.release()
    await a.close()
  })

  it('a key folder removed while held: the same client acquires again at once with a greater fence', async () => {
    const root = newRoot()
    const k = key('held')
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '3s' })
    const first = await a.acquire(k)
    removeKeyFolder(root, k)
    const started = performance.now()
    const second = await a.acquire(k, { timeout: '3s' })
    assert.ok(performance.now() - started < 1000, 'the folder should be recreated at once')
    assert.ok(second.fence > first.fence, `fence went from ${first.fence} to ${second.fence}`)
    // The first holder's lease went with its folder: its renewal finds out.
    const reason = await abortedWithin(first.signal, 5000)
    assert.ok(reason instanceof LockLostError)
    await first.release()
    assert.equal(
      (await a.inspect(k)).owner,
      second.owner,
      "the old holder's release must not touch the new lease",
    )
    await second.release()
    await a.close()
  })

  it('a key folder removed while a waiter waits: the waiter gets the lock with a greater fence', async () => {
    const root = newRoot()
    const k = key('waiter')
    const holder = createLockClient(fileBackend({ dir: root }), { ttl: '10s' })
    const waiter = createLockClient(fileBackend({ dir: root }), { ttl: '10s' })
    const first = await holder.acquire(k)
    const waiting = awaitLater(waiter.acquire(k, { timeout: '8s' }))
    await sleep(300)
    assert.equal((await waiter.inspect(k)).owner, first.owner, 'the waiter should still be waiting')
    const removedAt = performance.now()
    removeKeyFolder(root, k)
    const second = await waiting
    assert.ok(performance.now() - removedAt < 2000, 'the waiter should notice the free key promptly')
    assert.ok(second.fence > first.fence, `fence went from ${first.fence} to ${second.fence}`)
    await assert.rejects(first.extend(), LockLostError)
    await second.release()
    await Promise.all([holder.close(), waiter.close()])
  })

  it("the holder of a removed folder never extends or releases the new folder's lease of the same generation", async () => {
    const root = newRoot()
    const k = key('same-gen')
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '10s', renew: false })
    const b = createLockClient(fileBackend({ dir: root }), { ttl: '10s', renew: false })
    const first = await a.acquire(k)
    removeKeyFolder(root, k)
    // b's grant is the first record of the new folder, as first's was of the old one.
    const second = await b.acquire(k, { timeout: '3s' })
    await assert.rejects(first.extend(), LockLostError)
    await first.release()
    const info = await b.inspect(k)
    assert.equal(info.owner, second.owner)
    assert.equal(info.fence, second.fence)
    assert.equal(await a.tryAcquire(k), null, "b's lease must still hold")
    await second.release()
    await Promise.all([a.close(), b.close()])
  })

  it('fences keep increasing over many removals, whoever recreates the folder', async () => {
    const root = newRoot()
    const k = key('many')
    const clients = [0, 1, 2].map(() => createLockClient(fileBackend({ dir: root }), { ttl: '5s' }))
    const fences: bigint[] = []
    for (let i = 0; i < 9; i++) {
      const lock = await clients[i % 3]!.acquire(k, { timeout: '3s' })
      fences.push(lock.fence)
      if (i % 2 === 0) removeKeyFolder(root, k)
      else await lock.release()
    }
    for (let i = 1; i < fences.length; i++) {
      assert.ok(fences[i]! > fences[i - 1]!, `fences not increasing: ${fences.join(', ')}`)
    }
    await Promise.all(clients.map((c) => c.close()))
  })

  it('removing the whole lock root restarts epochs at the wall clock: fences still rise; inspect and doctor say so', async () => {
    const root = newRoot()
    const k = key('root')
    const backend = fileBackend({ dir: root })
    const a = createLockClient(backend, { ttl: '5s' })
    const first = await a.acquire(k)
    await first.release()
    rmSync(root, { recursive: true, force: true })
    // The clock must have moved past the epoch taken for the first grant (a loss and a regrant in the same
    // ms would repeat it: documented in epochs.ts).
    await sleep(5)
    const info = await a.inspect(k)
    assert.equal(info.held, false)
    assert.match(info.note ?? '', /removing the whole lock root .* restarts epochs at the wall clock/i)
    // The same client (which used the folder before) recreates everything.
    const again = await a.acquire(k, { timeout: '3s' })
    assert.ok(
      again.fence > first.fence,
      `a removed root restarts epochs at the clock: ${again.fence} > ${first.fence}`,
    )
    await again.release()
    const findings = await backend.doctor!(AbortSignal.timeout(5000))
    const text = findings.map((f) => f.message).join('\n')
    assert.match(text, /removing the whole lock root .* restarts epochs at the wall clock/i)
    assert.match(text, /\.epoch/)
    await a.close()
  })
})

describe('file backend: configuration errors', () => {
  it('a lock folder that cannot be created fails the acquire at once, naming the path and the errno', async () => {
    // Below a regular file: ENOTDIR even for root (EACCES would not happen when tests run as root).
    const file = join(dir.path, `plain-file-${randomBytes(3).toString('hex')}`)
    writeFileSync(file, 'not a folder')
    const root = join(file, 'locks')
    const client = createLockClient(fileBackend({ dir: root }), { ttl: '10s' })
    const started = performance.now()
    const error = await client.acquire('cfg', { timeout: '30s' }).then(
      () => assert.fail('acquired below a regular file'),
      (e: unknown) => e,
    )
    const elapsed = performance.now() - started
    assert.ok(elapsed < 1000, `took ${Math.round(elapsed)} ms: a setting error must not be retried`)
    assert.ok(error instanceof BackendUnavailableError, String(error))
    assert.equal(error.retryable, false)
    assert.match(error.message, /ENOTDIR/)
    assert.match(error.message, /not a folder/)
    assert.ok(error.message.includes(root), error.message)
    await client.close()
  })

  it('refuses an unknown URL parameter, naming it and the known ones', () => {
    const url = pathToFileURL(newRoot()).href
    assert.throws(
      () => fromUrl(new URL(`${url}?fsnyc=false`)),
      /Unknown parameter "fsnyc".*did you mean "fsync"\?.*Known: fsync/,
    )
    assert.equal(fromUrl(new URL(`${url}?fsync=false`)).id, `file://${new URL(url).pathname}`)
  })

  it('declares its key and ttl limits', () => {
    assert.deepEqual(fileBackend({ dir: newRoot() }).limits, { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 })
  })
})

describe('file backend: doctor', () => {
  it('leaves the root as it found it: its link() probe removes its own files, and no key is taken', async () => {
    const root = newRoot()
    mkdirSync(root)
    const backend = fileBackend({ dir: root })
    const findings = await backend.doctor!(AbortSignal.timeout(5000))
    assert.ok(
      findings.some((f) => f.level === 'ok' && /link\(\) works/.test(f.message)),
      JSON.stringify(findings),
    )
    assert.deepEqual(readdirSync(root), [])
  })

  it('reports a missing root, and does not create it', async () => {
    const root = newRoot()
    const findings = await fileBackend({ dir: root }).doctor!(AbortSignal.timeout(5000))
    assert.deepEqual(
      findings.map((f) => f.level),
      ['warn'],
    )
    assert.match(findings[0]!.message, /does not exist.*mkdir -p/)
    assert.equal(existsSync(root), false)
  })
})
