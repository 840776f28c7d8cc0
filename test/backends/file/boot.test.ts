/**
 * The file backend's durability per boot (issue 17): fences are flushed to disk once per boot (a
 * reservation of epochs in `<root>/.boot`), not per acquire, and still never go back across a reboot,
 * even when the old boot's unflushed writes are lost. A reboot is played with an injected boot id (a test
 * hook of this backend instance alone); a power loss by restoring the root, all but what was fsynced
 * (`.boot`), to a copy taken earlier: the worst a lost page cache can leave on disk. fsyncs are counted by
 * the backend's own Flush, through which every fsync it makes goes.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { cpSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { BOOT_FOLDER, bumpEpoch, type EpochSource, RESERVE } from '../../../src/backends/file/epochs.js'
import { Flush, highest, keyFolderName } from '../../../src/backends/file/generations.js'
import { bootId } from '../../../src/backends/file/host-clock.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { createLockClient } from '../../../src/index.js'
import { runScript } from '../../support/processes.js'
import { standingClock } from '../../support/standing-clock.js'
import { tempDir } from '../../support/temp.js'

const CONTENDER = fileURLToPath(new URL('../../fixtures/contender.js', import.meta.url))
const dir = tempDir('file-boot')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const newBoot = () => `test-boot-${randomBytes(8).toString('hex')}`

/**
 * A client on `root` as a process of boot `boot` sees it, its fsyncs counted in `flush`. Its wall clock
 * stands at the same time in every boot (it moves only as far as its bumps wait): a clock set back across
 * each reboot, which the wall-clock floor does not cover; here only the reservations keep fences rising.
 */
const clientOf = (root: string, boot: string, flush = new Flush()) =>
  createLockClient(fileBackend({ dir: root }, { bootId: boot, flush, ...standingClock(1_000_000) }), {
    ttl: '10s',
  })

/** Takes and releases `key` once; the fence. */
async function cycle(client: ReturnType<typeof clientOf>, key: string): Promise<bigint> {
  const lock = await client.acquire(key, { timeout: '5s' })
  await lock.release()
  return lock.fence
}

/** A copy of the root as the disk may hold it: what a power loss could roll the root back to. */
function snapshot(root: string): string {
  const copy = `${root}-snapshot-${randomBytes(3).toString('hex')}`
  cpSync(root, copy, { recursive: true })
  return copy
}

/**
 * A power loss after which the disk kept only what was fsynced: the reservations (`.boot`, fsynced when
 * made) stay as they are; every other folder (key folders, `.epoch`) goes back to the snapshot.
 */
function losePageCache(root: string, copy: string): void {
  for (const name of readdirSync(root))
    if (name !== BOOT_FOLDER) rmSync(join(root, name), { recursive: true })
  for (const name of readdirSync(copy)) {
    if (name !== BOOT_FOLDER) cpSync(join(copy, name), join(root, name), { recursive: true })
  }
}

const max = (xs: bigint[]) => xs.reduce((a, b) => (a > b ? a : b))

describe('file backend: durability per boot', () => {
  it('pays fsyncs once per boot, none per acquire (on old keys or new ones), in every process of the boot', async () => {
    const root = newRoot()
    const boot = newBoot()
    const flush = new Flush()
    const a = clientOf(root, boot, flush)
    await cycle(a, 'first')
    const perBoot = flush.count
    // The reservation: its record and its name (plus the new `.boot` folder's name in the root).
    assert.ok(perBoot >= 2 && perBoot <= 3, `the first grant of the boot made ${perBoot} fsyncs`)
    for (let i = 0; i < 30; i++) await cycle(a, 'first')
    for (let i = 0; i < 20; i++) await cycle(a, `new-${i}`)
    assert.equal(flush.count, perBoot, 'a grant within the boot made an fsync')
    // Another process of the same boot finds the reservation on disk: it flushes nothing either.
    const otherFlush = new Flush()
    const b = clientOf(root, boot, otherFlush)
    for (let i = 0; i < 10; i++) await cycle(b, 'first')
    for (let i = 0; i < 10; i++) await cycle(b, `other-${i}`)
    assert.equal(otherFlush.count, 0, 'a second process of the boot made an fsync')
    await Promise.all([a.close(), b.close()])
  })

  it('falls back to fsync per acquire on a host without a kernel boot id', async () => {
    const root = newRoot()
    const flush = new Flush()
    const a = clientOf(root, 'uptime:1700000000', flush)
    await cycle(a, 'k')
    const before = flush.count
    for (let i = 0; i < 5; i++) await cycle(a, 'k')
    // The record and its name, per grant.
    assert.ok(flush.count - before >= 10, `5 grants made ${flush.count - before} fsyncs`)
    await a.close()
  })

  it('fsync=false flushes nothing, not even per boot', async () => {
    const root = newRoot()
    const flush = new Flush()
    const a = createLockClient(fileBackend({ dir: root, fsync: false }, { bootId: newBoot(), flush }))
    for (let i = 0; i < 5; i++) await cycle(a, `k-${i}`)
    assert.equal(flush.count, 0)
    await a.close()
  })

  it('fences rise across a reboot that lost every unflushed write, on old keys, new keys and removed folders', async () => {
    const root = newRoot()
    // An earlier boot leaves the root as a power loss may find it.
    const z = clientOf(root, newBoot())
    await cycle(z, 'k')
    await cycle(z, 'gone')
    await z.close()
    const disk = snapshot(root)
    // The boot that crashes: many grants, new keys, a folder removed under its holder and recreated.
    const a = clientOf(root, newBoot())
    const granted: bigint[] = []
    for (let i = 0; i < 20; i++) granted.push(await cycle(a, 'k'))
    for (let i = 0; i < 5; i++) granted.push(await cycle(a, `new-${i}`))
    const held = await a.acquire('gone')
    granted.push(held.fence)
    rmSync(join(root, keyFolderName('gone')), { recursive: true })
    granted.push(await cycle(a, 'gone'))
    assert.ok(granted.at(-1)! > held.fence, 'a folder removed under its holder gave a lower fence')
    await a.close()
    losePageCache(root, disk)
    // After the reboot: every fence exceeds every fence the crashed boot granted, whatever the disk kept.
    const b = clientOf(root, newBoot())
    const top = max(granted)
    for (const key of ['k', 'gone', 'new-0', 'never-seen']) {
      const fence = await cycle(b, key)
      assert.ok(fence > top, `${key}: fence ${fence} after the reboot, ${top} granted before it`)
    }
    // And on within the new boot, removals included.
    const before = await cycle(b, 'k')
    rmSync(join(root, keyFolderName('k')), { recursive: true })
    assert.ok((await cycle(b, 'k')) > before)
    await b.close()
  })

  it('a boot that runs past its reservation reserves again, fsynced, before it issues beyond it', async () => {
    let now = 1_000_000
    const flush = new Flush()
    const source: EpochSource = {
      dir: newRoot(),
      durability: 'boot',
      boot: newBoot(),
      flush,
      clock: () => now,
      sleep: async (ms) => {
        now += ms
      },
    }
    const first = await bumpEpoch(source, 0n)
    const reserved = flush.count
    assert.ok(reserved > 0)
    assert.ok((await bumpEpoch(source, 0n)) > first)
    assert.equal(flush.count, reserved, 'an epoch inside the reservation made an fsync')
    now += Number(RESERVE) + 1 // The wall clock moves past the reservation: epochs follow it.
    const moved = BigInt(now)
    const far = await bumpEpoch(source, 0n)
    assert.ok(far >= moved)
    assert.ok(BigInt(now) > far, 'an epoch was returned before the clock passed it')
    assert.ok(flush.count > reserved, 'an epoch past the reservation was issued without a new one')
    const names = readdirSync(join(source.dir, BOOT_FOLDER))
    assert.ok(highest(names) > far, `reservation ${highest(names)} does not cover epoch ${far}`)
  })

  it(
    'processes starting at once on a new boot: their fences rise over the old boot, in order',
    {
      timeout: 120_000,
    },
    async () => {
      const root = newRoot()
      // The old boot (a fake id: the children run in this host's real boot, which is then "the new one").
      const old = clientOf(root, newBoot())
      await cycle(old, 'shared')
      const disk = snapshot(root)
      const granted: bigint[] = []
      for (let i = 0; i < 10; i++) granted.push(await cycle(old, 'shared'))
      await old.close()
      losePageCache(root, disk)
      const url = pathToFileURL(root).href
      const log = join(dir.path, `log-${randomBytes(3).toString('hex')}`)
      const marker = join(dir.path, `inside-${randomBytes(3).toString('hex')}`)
      const processes = 6
      const iterations = 3
      const codes = await Promise.all(
        Array.from({ length: processes }, () =>
          runScript(CONTENDER, [url, 'shared', String(iterations), log, marker]),
        ),
      )
      assert.deepEqual(codes, Array(processes).fill(0), 'every contender should finish cleanly')
      const lines = readFileSync(log, 'utf8').trim().split('\n')
      assert.deepEqual(
        lines.filter((l) => l.startsWith('OVERLAP')),
        [],
      )
      const fences = lines.map((l) => BigInt(l.split(' ')[0]!))
      assert.equal(fences.length, processes * iterations)
      const top = max(granted)
      for (let i = 0; i < fences.length; i++) {
        assert.ok(fences[i]! > top, `fence ${fences[i]} after the reboot, ${top} granted before it`)
        if (i > 0) assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} logged after ${fences[i - 1]}`)
      }
      // The reservation now on disk is the real boot's.
      const names = readdirSync(join(root, BOOT_FOLDER)).filter((n) => /^\d+$/.test(n))
      const latest = JSON.parse(readFileSync(join(root, BOOT_FOLDER, names.sort().at(-1)!), 'utf8'))
      assert.equal(latest.boot, bootId())
    },
  )
})
