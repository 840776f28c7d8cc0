/**
 * A quick reboot (a new boot id, the wall clock where it was) followed by a cleaner, with several
 * processes taking the keys all along: fences never go back. After a quick reboot the new boot's epochs
 * start where the old boot's reservation ended, ahead of the wall clock; a cleaner that then removes
 * `.epoch` and a key's folder, or the whole root, must not let an epoch be issued again below them (see
 * epochs.ts, the header). Also the kit's `reboot` and `deleteState` hooks the chaos suite uses.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { keyFolderName } from '../../../src/backends/file/generations.js'
import { bootId } from '../../../src/backends/file/host-clock.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { createLockClient } from '../../../src/index.js'
import { fileKit } from '../../kits/file.js'
import type { KitStore } from '../../kits/kit.js'
import { tempDir } from '../../support/temp.js'
import { pollUntil } from '../../support/wait.js'

const WORKER = fileURLToPath(new URL('../../fixtures/fence-worker.js', import.meta.url))
const dir = tempDir('file-reboot')
after(() => dir.cleanup())

const KEYS = ['a', 'b', 'c', 'd']

/** One grant as a worker logged it: times on the host's monotonic clock (ns). */
interface Grant {
  readonly key: string
  readonly start: bigint
  readonly granted: bigint
  readonly fence: bigint
}

function readGrants(log: string): Grant[] {
  if (!existsSync(log)) return []
  const grants: Grant[] = []
  for (const line of readFileSync(log, 'utf8').split('\n')) {
    const [key, start, granted, fence] = line.split(' ')
    // A line cut short by a SIGKILL, or an error line (a cleaner removed a folder under an acquire).
    if (!KEYS.includes(key!) || !/^\d+$/.test(fence ?? '')) continue
    grants.push({ key: key!, start: BigInt(start!), granted: BigInt(granted!), fence: BigInt(fence!) })
  }
  return grants
}

/**
 * Every grant whose fence is not above a grant of the same key made before it started: fences that went
 * back (or repeated).
 */
function regressions(grants: readonly Grant[]): string[] {
  const found: string[] = []
  for (const key of KEYS) {
    const ofKey = grants.filter((g) => g.key === key)
    const byGranted = [...ofKey].sort((x, y) => (x.granted < y.granted ? -1 : 1))
    const byStart = [...ofKey].sort((x, y) => (x.start < y.start ? -1 : 1))
    let i = 0
    let top: Grant | undefined
    for (const g of byStart) {
      while (i < byGranted.length && byGranted[i]!.granted < g.start) {
        if (!top || byGranted[i]!.fence > top.fence) top = byGranted[i]
        i++
      }
      if (top && g.fence <= top.fence) found.push(`${key}: ${g.fence} granted after ${top.fence}`)
    }
  }
  return found
}

/** The workers of one boot: processes that take the keys until they are killed. */
function startWorkers(store: KitStore, log: string, count: number, keys = KEYS): ChildProcess[] {
  return Array.from({ length: count }, () =>
    spawn(process.execPath, [WORKER, store.url(), keys.join(','), log], { stdio: 'ignore' }),
  )
}

/** Pauses (SIGSTOP) or resumes (SIGCONT) the processes: which of them acts first after a cleaner. */
const signalAll = (workers: readonly ChildProcess[], signal: 'SIGSTOP' | 'SIGCONT') => {
  for (const w of workers) w.kill(signal)
}

/** The host goes down: every process of the boot is gone (SIGKILL), none outlives it. */
async function killAll(workers: readonly ChildProcess[]): Promise<void> {
  await Promise.all(
    workers.map(
      (w) =>
        new Promise<void>((resolve) => {
          if (w.exitCode !== null || w.signalCode !== null) return resolve()
          w.once('exit', () => resolve())
          w.kill('SIGKILL')
        }),
    ),
  )
}

/** Waits until the log holds `count` grants more than `from` (the workers are slow to start under load). */
async function grantsBeyond(log: string, from: number, count: number): Promise<number> {
  const now = await pollUntil(
    () => readGrants(log).length,
    (n) => n >= from + count,
    { withinMs: 60_000, everyMs: 50 },
  )
  assert.ok(now >= from + count, `the workers made ${now - from} grants in 60 s, not ${count}`)
  return now
}

describe('file backend: a quick reboot, then a cleaner', () => {
  it('the kit plays a reboot (a new boot id for what starts next) and a cleaner (a key, or everything)', async () => {
    const store = await fileKit.start({ dir: join(dir.path, randomBytes(4).toString('hex')) })
    try {
      const before = bootId()
      await store.reboot!()
      const booted = bootId()
      assert.notEqual(booted, before)
      const root = fileURLToPath(store.url())
      const client = createLockClient(fileBackend({ dir: root }), { ttl: '5s' })
      const lock = await client.acquire('k')
      await lock.release()
      await (await client.acquire('other')).release()
      const record = readdirSync(join(root, keyFolderName('k'))).filter((n) => /^\d+$/.test(n))
      const written = JSON.parse(readFileSync(join(root, keyFolderName('k'), record.at(-1)!), 'utf8'))
      assert.equal(written.boot, booted, 'a backend made after the reboot writes the new boot id')
      await store.deleteState!('k')
      assert.ok(!existsSync(join(root, keyFolderName('k'))))
      assert.ok(existsSync(join(root, keyFolderName('other'))))
      await store.deleteState!()
      assert.deepEqual(readdirSync(root), [])
      await client.close()
    } finally {
      await store.close()
    }
  })

  it(
    'fences never go back across quick reboots followed by a cleaner, with several processes',
    {
      timeout: 300_000,
    },
    async () => {
      const store = await fileKit.start({ dir: join(dir.path, randomBytes(4).toString('hex')) })
      const root = fileURLToPath(store.url())
      const log = join(dir.path, `log-${randomBytes(3).toString('hex')}`)
      let workers: ChildProcess[] = []
      try {
        // The first boot: the keys are taken, epochs are reserved.
        await store.reboot!()
        workers = startWorkers(store, log, 3)
        let seen = await grantsBeyond(log, 0, 20)
        for (let round = 0; round < 3; round++) {
          // A quick reboot: the processes are gone, a new boot starts at once, the wall clock runs on.
          await killAll(workers)
          await store.reboot!()
          workers = startWorkers(store, log, 3)
          seen = await grantsBeyond(log, seen, 10)
          // A cleaner while the processes are idle (paused): `.epoch` and a key's folder, then the whole
          // root. A process that starts after it (a cron job) knows nothing of the epochs issued before,
          // and acts first; then the others go on, with what they saw before the cleaner.
          const key = KEYS[round % KEYS.length]!
          for (const clean of [
            async () => {
              rmSync(join(root, '.epoch'), { recursive: true, force: true })
              await store.deleteState!(key)
            },
            () => store.deleteState!(),
          ]) {
            signalAll(workers, 'SIGSTOP')
            await clean()
            const fresh = startWorkers(store, log, 1, [key])
            seen = await grantsBeyond(log, seen, 5)
            signalAll(workers, 'SIGCONT')
            workers.push(...fresh)
            seen = await grantsBeyond(log, seen, 10)
          }
        }
        await killAll(workers)
        const grants = readGrants(log)
        const back = regressions(grants)
        assert.deepEqual(back.slice(0, 10), [], `${back.length} of ${grants.length} grants went back`)
      } finally {
        await killAll(workers)
        await store.close()
      }
    },
  )
})
