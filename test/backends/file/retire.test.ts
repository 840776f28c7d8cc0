/**
 * The file backend's retire (retire.ts): a released key folder is removed once the key stays unused, so
 * the lock root keeps what is in use, not every name ever locked; and the fences of a key whose folder
 * went still only grow, in this process and in others, with removals racing other processes' acquires.
 * Real folders and processes; no mocks.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { keyFolderName } from '../../../src/backends/file/generations.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { FolderRetirer, retireFolder } from '../../../src/backends/file/retire.js'
import { createLockClient } from '../../../src/index.js'
import { runScript } from '../../support/processes.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'

const CONTENDER = fileURLToPath(new URL('../../fixtures/contender.js', import.meta.url))

const dir = tempDir('file-retire')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const key = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
/** The key folders in a lock root (`.epoch` and `.boot` are not). */
const keyFolders = (root: string) => readdirSync(root).filter((name) => name.includes('~'))

/** Waits, up to `ms`, for `done()`; whether it came true. */
async function eventually(done: () => boolean, ms: number): Promise<boolean> {
  for (const end = performance.now() + ms; performance.now() < end; await sleep(20)) if (done()) return true
  return done()
}

describe('file backend: released key folders are retired', () => {
  it('names acquired and released leave no folder behind once they stay unused', async () => {
    const root = newRoot()
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 50 }), { ttl: '5s' })
    for (let i = 0; i < 200; i++) await (await client.acquire(key(`name-${i}`))).release()
    assert.ok(
      await eventually(() => keyFolders(root).length === 0, 20_000),
      `${keyFolders(root).length} of 200 key folders left`,
    )
    await client.close()
  })

  it('a burst of releases is retired a slice at a time: other work runs between the removals', async () => {
    const root = newRoot()
    // A client that never retires leaves 2,000 released folders; one retirer is then told of them all at
    // once, as a burst of releases within a few milliseconds would.
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: Number.POSITIVE_INFINITY }))
    const keys = Array.from({ length: 2000 }, (_, i) => key(`burst-${i}`))
    for (const k of keys) await (await client.acquire(k)).release()
    await client.close()
    // Released at one instant of a clock that then jumps past their time: every one is due at the sweep.
    let clock = 0
    const retirer = new FolderRetirer(50, () => clock)
    for (const k of keys) {
      const folder = join(root, keyFolderName(k))
      const gen = readdirSync(folder).filter((name) => /^\d+$/.test(name))[0]!
      const { dev, ino, mtimeNs } = statSync(join(folder, gen), { bigint: true })
      retirer.released(folder, BigInt(gen), { dev, ino, mtimeNs })
    }
    clock = 60_000
    const first = join(root, keyFolderName(keys[0]!))
    const last = join(root, keyFolderName(keys.at(-1)!))
    // Looks between turns of the event loop: only a sweep that yields can be seen half done (each removal
    // is several system calls; 2,000 of them take far longer than one slice).
    let halfDone = false
    while (existsSync(last)) {
      if (!existsSync(first)) halfDone = true
      await new Promise((resume) => setImmediate(resume))
    }
    assert.ok(halfDone, 'the 2,000 removals all ran in one turn of the event loop')
    assert.equal(keyFolders(root).length, 0)
  })

  it('closing the client retires every folder it released, at once', async () => {
    const root = newRoot()
    const client = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    for (let i = 0; i < 100; i++) await (await client.acquire(key(`close-${i}`))).release()
    const held = await client.acquire(key('held'))
    await client.close()
    // The lease still held at close is released by close; every other folder is gone.
    assert.ok(keyFolders(root).length <= 1, `${keyFolders(root).length} key folders left`)
    assert.ok(held.fence > 0n)
  })

  it('a key used over and over keeps its folder (and its fence range)', async () => {
    const root = newRoot()
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 60_000 }), { ttl: '5s' })
    const k = key('hot')
    const first = await client.acquire(k)
    await first.release()
    const second = await client.acquire(k)
    await second.release()
    assert.equal(second.fence, first.fence + 2n, 'the same folder: fences go on by generation')
    assert.deepEqual(keyFolders(root), [keyFolderName(k)])
    await client.close()
  })

  it(
    'keys released lately keep their folders, up to as many as the hot path remembers',
    { timeout: 300_000 },
    async () => {
      const root = newRoot()
      const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 600_000 }), { ttl: '5s' })
      // More than 10,000: a bound that low removed folders of keys still in use (and made them again).
      const count = 11_000
      for (let i = 0; i < count; i++) await (await client.acquire(`many-${i}`)).release()
      assert.equal(keyFolders(root).length, count, 'no folder removed before its time')
      await client.close()
      assert.equal(keyFolders(root).length, 0, 'closing retires them all')
    },
  )

  it('after a retire, the next grant of the key has a greater fence, here and in another process', async () => {
    const root = newRoot()
    const k = key('again')
    const folder = join(root, keyFolderName(k))
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 0 }), { ttl: '5s' })
    const fences: bigint[] = []
    for (let i = 0; i < 3; i++) {
      const lock = await client.acquire(k)
      fences.push(lock.fence)
      await lock.release()
      assert.ok(await eventually(() => !existsSync(folder), 10_000), 'the folder should be retired')
    }
    const log = join(dir.path, `log-${randomBytes(3).toString('hex')}`)
    const marker = join(dir.path, `marker-${randomBytes(3).toString('hex')}`)
    assert.equal(await runScript(CONTENDER, [pathToFileURL(root).href, k, '1', log, marker]), 0)
    fences.push(BigInt(readFileSync(log, 'utf8').trim().split(' ')[0]!))
    const last = await client.acquire(k)
    fences.push(last.fence)
    await last.release()
    for (let i = 1; i < fences.length; i++) {
      assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} granted after ${fences[i - 1]}`)
    }
    await client.close()
  })

  it('a folder with another writer in it (its temp file) is left alone', async () => {
    const root = newRoot()
    const k = key('alone')
    const folder = join(root, keyFolderName(k))
    const client = createLockClient(fileBackend({ dir: root }, { retireAfterMs: 60_000 }), { ttl: '5s' })
    const lock = await client.acquire(k)
    const [name] = readdirSync(folder)
    const info = statSync(join(folder, name!), { bigint: true })
    const stamp = { dev: info.dev, ino: info.ino, mtimeNs: info.mtimeNs }
    // A writer between its pin and its link: whatever it links must find its predecessor in place.
    writeFileSync(join(folder, '.tmp-someone-else-0'), '')
    assert.equal(retireFolder(folder, BigInt(name!), stamp), false, 'another writer is in it')
    await lock.release()
    await client.close()
    assert.ok(existsSync(folder), 'a folder with another writer in it stays')
  })

  it(
    'processes retiring the folder while others acquire it: never two holders, fences only grow',
    { timeout: 180_000 },
    async () => {
      const root = newRoot()
      const k = key('race')
      const log = join(dir.path, `log-${randomBytes(3).toString('hex')}`)
      const marker = join(dir.path, `marker-${randomBytes(3).toString('hex')}`)
      const processes = 4
      const iterations = 25
      // A removal needs a release that no other process's acquire follows within a moment: on a loaded
      // machine 100 contended rounds may have none, so rounds go on (bounded) until one removal happened.
      const MAX_ROUNDS = 5
      let lines: string[] = []
      let epochs = new Set<bigint>()
      let rounds = 0
      while (rounds < MAX_ROUNDS && epochs.size < 2) {
        rounds++
        const codes = await Promise.all(
          Array.from({ length: processes }, () =>
            runScript(CONTENDER, [pathToFileURL(root).href, k, String(iterations), log, marker, 'retire']),
          ),
        )
        assert.deepEqual(codes, Array(processes).fill(0), 'every contender should finish cleanly')
        const before = lines.length
        lines = readFileSync(log, 'utf8').trim().split('\n')
        // Removed and made again while the others contended, within this round (a round's end retires the
        // folder anyway): each time a fresh fence range (epoch).
        const granted = lines.slice(before).filter((l) => !l.startsWith('OVERLAP'))
        epochs = new Set(granted.map((l) => BigInt(l.split(' ')[0]!) >> 21n))
      }
      assert.deepEqual(
        lines.filter((l) => l.startsWith('OVERLAP')),
        [],
      )
      const fences = lines.map((l) => BigInt(l.split(' ')[0]!))
      assert.equal(fences.length, rounds * processes * iterations)
      assert.ok(epochs.size > 1, `the folder was never retired and made again in ${rounds} rounds`)
      for (let i = 1; i < fences.length; i++) {
        assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} granted after ${fences[i - 1]}`)
      }
      // Each process retired its last release at close, unless another one was in the folder then.
      assert.ok(keyFolders(root).length <= 1)
    },
  )
})
