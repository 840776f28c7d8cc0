/**
 * The file backend's epoch budget (epochs.ts): epochs stay below 2^42, so fences stay below 2^63 and fit
 * a SQL bigint, and no epoch is issued far ahead of the wall clock (the clock is the floor that keeps
 * fences rising when the root is lost). A process whose clock is past the budget (an RTC reset to a far
 * future), a root pushed past it, or epochs that lead the clock by more than MAX_LEAD_MS: refused, with
 * an error that names the root, the epoch and what to do; nothing is issued.
 */
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { EPOCH_FOLDER, EPOCH_LIMIT, MAX_LEAD_MS, RANGE } from '../../../src/backends/file/epochs.js'
import { genName, highest } from '../../../src/backends/file/generations.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { BackendUnavailableError, createLockClient } from '../../../src/index.js'
import { standingClock } from '../../support/standing-clock.js'
import { tempDir } from '../../support/temp.js'

const dir = tempDir('file-epoch-budget')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))

/** `.epoch` as a process with another clock left it: its latest epoch `epoch`. */
function epochIssued(root: string, epoch: bigint): void {
  mkdirSync(join(root, EPOCH_FOLDER), { recursive: true })
  writeFileSync(join(root, EPOCH_FOLDER, genName(epoch)), JSON.stringify({ epoch: epoch.toString() }))
}

/** The error of one acquire of a new key on `root` (the test fails if it is granted). */
async function refusalOf(root: string, hooks: Parameters<typeof fileBackend>[1] = {}): Promise<unknown> {
  const client = createLockClient(fileBackend({ dir: root }, hooks), { ttl: '5s' })
  let fence: bigint
  try {
    const lock = await client.acquire('job', { timeout: '1s' })
    fence = lock.fence
    await lock.release()
  } catch (error) {
    return error
  } finally {
    await client.close()
  }
  assert.fail(`granted with fence ${fence} (epoch ${fence / RANGE})`)
}

describe('file backend: the epoch budget', () => {
  it('a wall clock past the budget (an RTC reset) issues no epoch: refused, naming the clock', async () => {
    const root = newRoot()
    const year2200 = Date.UTC(2200, 0, 1)
    const error = await refusalOf(root, { clock: () => year2200 })
    assert.ok(error instanceof BackendUnavailableError, String(error))
    assert.equal(error.retryable, false)
    assert.match(error.message, /2200-01-01/)
    assert.match(error.message, /budget/)
    assert.match(error.message, /Set the clock right/)
    const names = existsSync(join(root, EPOCH_FOLDER)) ? readdirSync(join(root, EPOCH_FOLDER)) : []
    assert.equal(highest(names), 0n, 'an epoch was issued')
  })

  it('a root pushed past the budget is refused for new fence ranges, naming the root and the way out', async () => {
    const root = newRoot()
    epochIssued(root, EPOCH_LIMIT + 5n)
    const error = await refusalOf(root)
    assert.ok(error instanceof BackendUnavailableError, String(error))
    assert.equal(error.retryable, false)
    assert.ok(error.message.includes(root), error.message)
    assert.ok(error.message.includes(join(root, EPOCH_FOLDER)), error.message)
    assert.match(error.message, /reset the fences/)
    // `doctor` says so too.
    const findings = await fileBackend({ dir: root }).doctor!(AbortSignal.timeout(10_000))
    const found = findings.find((f) => f.level === 'error' && /new fence ranges are refused/.test(f.message))
    assert.ok(found, JSON.stringify(findings))
  })

  it('epochs far ahead of the wall clock (a clock set back, or run ahead before) are refused until it catches up', async () => {
    const root = newRoot()
    const ahead = BigInt(Date.now()) + MAX_LEAD_MS + 60_000n
    epochIssued(root, ahead)
    const error = await refusalOf(root)
    assert.ok(error instanceof BackendUnavailableError, String(error))
    assert.equal(error.retryable, true)
    assert.match(error.message, /lead this host's wall clock/)
    assert.ok(error.message.includes(root), error.message)
    // Within the budget and a clock that has caught up, the same root grants again, above that epoch.
    const client = createLockClient(fileBackend({ dir: root }, standingClock(Number(ahead) + 1)), {
      ttl: '5s',
    })
    const lock = await client.acquire('job')
    assert.ok(lock.fence / RANGE > ahead)
    await lock.release()
    await client.close()
  })
})
