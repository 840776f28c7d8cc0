/**
 * `.epoch` lost while this boot's epochs lead the wall clock (its reservation started at the previous
 * boot's reservation end, ahead of the clock after a quick reboot). A bump that lists an empty `.epoch`,
 * or starts from a stale latest epoch of its process, issues an epoch that may have been issued before;
 * a key whose folder was also removed must still get a greater fence. Epochs are used only once the
 * clock has passed them, and a process reuses its last epoch only while `.epoch`'s latest record is the
 * one it wrote (epochs.ts). Each case failed once.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { mkdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { RESERVE } from '../../../src/backends/file/epochs.js'
import { genName, keyFolderName } from '../../../src/backends/file/generations.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { createLockClient } from '../../../src/index.js'
import { tempDir } from '../../support/temp.js'

const dir = tempDir('file-epoch-loss')
after(() => dir.cleanup())

/**
 * The previous boot reserved epochs up to R, RESERVE ahead of the clock (it rebooted right after), as
 * epochs.ts writes it: `.boot/<R>` with that boot's id.
 */
function previousBootReservedAhead(root: string): void {
  const R = BigInt(Date.now()) + RESERVE
  mkdirSync(join(root, '.boot'), { recursive: true })
  writeFileSync(
    join(root, '.boot', genName(R)),
    JSON.stringify({ v: 1, boot: 'previous-boot', from: (R - RESERVE).toString() }),
  )
}

describe('file fences after .epoch is lost within a boot that leads the clock', () => {
  it('a key folder removed and .epoch removed: the next grant must still have a greater fence', async () => {
    const root = join(dir.path, randomBytes(4).toString('hex'))
    previousBootReservedAhead(root)
    const k = `k:${randomBytes(3).toString('hex')}`
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    const first = await a.acquire(k)
    await first.release()
    // A tmp cleaner (or an operator) removes `.epoch` and the key's folder; `.boot` stays.
    rmSync(join(root, '.epoch'), { recursive: true, force: true })
    rmSync(join(root, keyFolderName(k)), { recursive: true, force: true })
    // Another process of the same boot (a second path to the same root gives it its own per-process
    // tables here, as a separate process would have).
    const alias = `${root}-alias`
    symlinkSync(root, alias)
    const b = createLockClient(fileBackend({ dir: alias }), { ttl: '5s' })
    const second = await b.acquire(k, { timeout: '3s' })
    await second.release()
    await Promise.all([a.close(), b.close()])
    assert.ok(second.fence > first.fence, `fence went from ${first.fence} to ${second.fence}`)
  })

  it('a process that reuses its last epoch for a new key never goes below a fence granted before', async () => {
    const root = join(dir.path, randomBytes(4).toString('hex'))
    previousBootReservedAhead(root)
    const k1 = `k1:${randomBytes(3).toString('hex')}`
    const k2 = `k2:${randomBytes(3).toString('hex')}`
    const k3 = `k3:${randomBytes(3).toString('hex')}`
    // Process A takes epoch R for k1; process B takes R + 1 for k2.
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    await (await a.acquire(k1)).release()
    symlinkSync(root, `${root}-b`)
    const b = createLockClient(fileBackend({ dir: `${root}-b` }), { ttl: '5s' })
    const onB = await b.acquire(k2)
    await onB.release()
    // `.epoch` and k2's folder removed; process C's new key re-issues R, so `.epoch` ends with R again.
    rmSync(join(root, '.epoch'), { recursive: true, force: true })
    rmSync(join(root, keyFolderName(k2)), { recursive: true, force: true })
    symlinkSync(root, `${root}-c`)
    const c = createLockClient(fileBackend({ dir: `${root}-c` }), { ttl: '5s' })
    await (await c.acquire(k3)).release()
    // A starts k2's new folder with its last epoch R (startAgain: `.epoch` ends with it, k2 not in its set).
    const onA = await a.acquire(k2, { timeout: '3s' })
    await onA.release()
    await Promise.all([a.close(), b.close(), c.close()])
    assert.ok(onA.fence > onB.fence, `k2's fence went from ${onB.fence} to ${onA.fence}`)
  })

  it('a process whose latest epoch seen is stale never issues an epoch another process used', async () => {
    const root = join(dir.path, randomBytes(4).toString('hex'))
    previousBootReservedAhead(root)
    const k1 = `k1:${randomBytes(3).toString('hex')}`
    const k2 = `k2:${randomBytes(3).toString('hex')}`
    // Process A takes an epoch (it saw R issued).
    const a = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
    await (await a.acquire(k1)).release()
    // Process B takes R + 1, R + 2, R + 3 for k2 (its folder removed each time).
    symlinkSync(root, `${root}-b`)
    const b = createLockClient(fileBackend({ dir: `${root}-b` }), { ttl: '5s' })
    let onB = await b.acquire(k2)
    for (let i = 0; i < 3; i++) {
      await onB.release()
      rmSync(join(root, keyFolderName(k2)), { recursive: true, force: true })
      onB = await b.acquire(k2)
    }
    await onB.release()
    // A cleaner removes `.epoch` and k2's folder; A, which saw R last, takes k2 next.
    rmSync(join(root, '.epoch'), { recursive: true, force: true })
    rmSync(join(root, keyFolderName(k2)), { recursive: true, force: true })
    const onA = await a.acquire(k2, { timeout: '3s' })
    await onA.release()
    await Promise.all([a.close(), b.close()])
    assert.ok(onA.fence > onB.fence, `k2's fence went from ${onB.fence} to ${onA.fence}`)
  })
})
