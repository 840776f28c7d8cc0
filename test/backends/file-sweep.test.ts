/**
 * The file backend's sweep and prune (sweep.ts): key folders nobody will release (a SIGKILLed holder's,
 * an expired or broken lease's) are removed by a live client, fences of a swept name still only grow, and
 * a held folder (its holder running, paused, or waited on) is never removed. `doctor` counts names kept
 * and held. Real folders and processes; records written by hand where a state is hard to reach otherwise.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { genName, keyFolderName } from '../../src/backends/file/generations.js'
import { markProcesses } from '../../src/backends/file/holders.js'
import { bootId, monotonicMs } from '../../src/backends/file/host-clock.js'
import { fileBackend } from '../../src/backends/file/index.js'
import { newRecord, type RecordFields } from '../../src/backends/file/records.js'
import { createLockClient } from '../../src/index.js'
import { runCli, startHold } from '../support/processes.js'
import { tempDir } from '../support/temp.js'
import { sleep } from '../support/time.js'

const dir = tempDir('file-sweep')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const key = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
const folderIn = (root: string, k: string) => join(root, keyFolderName(k))
/** Keeps every folder this process releases (no retire): only the sweep or prune removes one. */
const NO_RETIRE = { retireAfterMs: Number.POSITIVE_INFINITY }
/** Sweeps whatever has ended, after every grant. */
const SWEEP_NOW = { ...NO_RETIRE, sweepAfterMs: 0, sweepEveryMs: 0 }

/** Waits, up to `ms`, for `done()`; whether it came true. */
async function eventually(done: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  for (const end = performance.now() + ms; performance.now() < end; await sleep(20)) {
    if (await done()) return true
  }
  return done()
}

/** Writes generation `gen` of `k` by hand (a state the test needs, from a process that is gone). */
function forge(root: string, k: string, gen: bigint, fields: Partial<RecordFields>, boot = bootId()): string {
  const folder = folderIn(root, k)
  mkdirSync(folder, { recursive: true })
  const fence = 1000n
  const record = newRecord(
    { key: k, state: 'held', owner: 'gone', fence, base: fence - gen, deadline: 0, ...fields },
    boot,
  )
  writeFileSync(join(folder, genName(gen)), JSON.stringify(record))
  return folder
}

/** The pid of a process that has exited and been reaped. */
function deadPid(): number {
  return Number(spawnSync('sh', ['-c', 'echo $$'], { encoding: 'utf8' }).stdout.trim())
}

describe('file backend: the sweep removes folders nobody will release', () => {
  it('a SIGKILLed holder’s folder is gone after a live client’s sweep; the name’s next fence is greater', async () => {
    const root = newRoot()
    const k = key('killed')
    const holder = startHold(pathToFileURL(root).href, k, ['--ttl', '60s'])
    const acquired = await holder.next('acquired')
    const client = createLockClient(fileBackend({ dir: root }, SWEEP_NOW), { ttl: '5s' })
    try {
      // While the holder runs, sweeps after grants leave its folder.
      for (let i = 0; i < 5; i++) await (await client.acquire(key('other'))).release()
      await sleep(50)
      assert.ok(existsSync(folderIn(root, k)), 'a live holder’s folder stays')
      holder.child.kill('SIGKILL')
      await holder.exited
      // Its lease ended with its process; nobody releases it: the sweep after a grant removes it.
      const swept = await eventually(async () => {
        await (await client.acquire(key('other'))).release()
        return !existsSync(folderIn(root, k))
      }, 20_000)
      assert.ok(swept, 'the killed holder’s folder should be swept')
      const lock = await client.acquire(k)
      assert.ok(lock.fence > BigInt(acquired.fence as string), `fence ${lock.fence} after ${acquired.fence}`)
      await lock.release()
    } finally {
      await client.close()
    }
  })

  it('a name this process started, swept and taken again, gets a greater fence each time', async () => {
    const root = newRoot()
    const k = key('again')
    const client = createLockClient(fileBackend({ dir: root }, SWEEP_NOW), { ttl: '5s' })
    try {
      const fences: bigint[] = []
      for (let i = 0; i < 4; i++) {
        const lock = await client.acquire(k)
        fences.push(lock.fence)
        await lock.release()
        const swept = await eventually(async () => {
          await (await client.acquire(key('other'))).release()
          return !existsSync(folderIn(root, k))
        }, 20_000)
        assert.ok(swept, 'the released folder should be swept')
      }
      for (let i = 1; i < fences.length; i++) {
        assert.ok(fences[i]! > fences[i - 1]!, `fence ${fences[i]} granted after ${fences[i - 1]}`)
      }
    } finally {
      await client.close()
    }
  })

  it('a held folder is never swept: its holder running, paused (SIGSTOP), or waited on', async () => {
    const root = newRoot()
    const k = key('held')
    const holder = startHold(pathToFileURL(root).href, k, ['--ttl', '60s'])
    const acquired = await holder.next('acquired')
    const waiterClient = createLockClient(fileBackend({ dir: root }, NO_RETIRE), { ttl: '5s' })
    const sweeper = createLockClient(fileBackend({ dir: root }, SWEEP_NOW), { ttl: '5s' })
    const backend = fileBackend({ dir: root }, NO_RETIRE)
    try {
      const waiting = waiterClient.acquire(k, { timeout: '60s' })
      waiting.catch(() => {})
      const before = readdirSync(folderIn(root, k)).filter((n) => /^\d+$/.test(n))
      holder.child.kill('SIGSTOP')
      try {
        for (let i = 0; i < 20; i++) await (await sweeper.acquire(key('other'))).release()
        const pruned = await backend.prune()
        assert.equal(pruned.held, 1, 'the paused holder’s lease counts as held')
      } finally {
        holder.child.kill('SIGCONT')
      }
      const now = readdirSync(folderIn(root, k)).filter((n) => /^\d+$/.test(n))
      assert.ok(now.includes(before.at(-1)!), `the held generation ${before.at(-1)} stays (found ${now})`)
      holder.send('release')
      const lock = await waiting
      assert.ok(lock.fence > BigInt(acquired.fence as string), 'the waiter’s fence is greater')
      await lock.release()
    } finally {
      holder.child.kill('SIGKILL')
      await holder.exited
      await backend.close()
      await sweeper.close()
      await waiterClient.close()
    }
  })
})

describe('file backend: prune', () => {
  it('removes every ended state, whatever its age, and nothing held or in use; only under its prefix', async () => {
    const root = newRoot()
    const boot = bootId()
    const gone = { processes: { ...markProcesses([process.pid])!, marks: [{ pid: deadPid(), start: '1' }] } }
    const freeKey = key('p:free')
    const ended = {
      free: forge(root, freeKey, 3n, { state: 'free', owner: null }),
      expired: forge(root, key('p:expired'), 2n, { deadline: monotonicMs() - 1 }),
      otherBoot: forge(root, key('p:boot'), 1n, { deadline: monotonicMs() + 60_000 }, `${boot}-before`),
      deadHolder: forge(root, key('p:dead'), 1n, { deadline: monotonicMs() + 60_000, ...gone }),
      // Two generations left by a writer that crashed between its link and its collection.
      twoGenerations: forge(root, key('p:two'), 4n, { state: 'free', owner: null }),
      empty: join(root, keyFolderName(key('p:empty'))),
    }
    writeFileSync(join(ended.twoGenerations, genName(3n)), '{}')
    mkdirSync(ended.empty)
    const live = forge(root, key('p:live'), 1n, { deadline: monotonicMs() + 60_000 })
    const unreadable = join(root, keyFolderName(key('p:unreadable')))
    mkdirSync(unreadable)
    writeFileSync(join(unreadable, genName(1n)), 'not json')
    // A writer between its pin and its link: its fresh temp file keeps the folder.
    const inUse = forge(root, key('p:in-use'), 1n, { state: 'free', owner: null })
    writeFileSync(join(inUse, '.tmp-someone-else-0'), '')
    const outside = forge(root, key('q:free'), 1n, { state: 'free', owner: null })

    const backend = fileBackend({ dir: root }, NO_RETIRE)
    try {
      const doctor = (await backend.doctor!(AbortSignal.timeout(60_000))).map((f) => f.message).join('\n')
      assert.match(doctor, /lock names kept: 10 \(key folders in .*\), 2 of them held/)
      // The empty folder names no key: only a prune of every key removes it.
      const result = await backend.prune('p:')
      assert.deepEqual(result, { removed: 5, held: 2, kept: 1 })
      for (const [what, folder] of Object.entries(ended)) {
        if (what !== 'empty') assert.ok(!existsSync(folder), `${what}: its folder should be pruned`)
      }
      for (const folder of [live, unreadable, inUse, outside, ended.empty]) assert.ok(existsSync(folder))
      assert.deepEqual(await backend.prune(), { removed: 2, held: 2, kept: 1 })
      assert.ok(!existsSync(outside) && !existsSync(ended.empty))
      // A pruned name starts a new fence range, above the fence its folder kept.
      const client = createLockClient(backend, { ttl: '5s' })
      const lock = await client.acquire(freeKey)
      assert.ok(lock.fence > 1000n)
      await lock.release()
    } finally {
      await backend.close()
    }
  })

  it('fencelock prune [prefix] removes the ended names of a lock folder and prints what it did', async () => {
    const root = newRoot()
    const done = forge(root, key('cli:done'), 1n, { state: 'free', owner: null })
    const live = forge(root, key('cli:live'), 1n, { deadline: monotonicMs() + 60_000 })
    const other = forge(root, key('other'), 1n, { state: 'free', owner: null })
    const r = await runCli(['prune', 'cli:', '--url', pathToFileURL(root).href])
    assert.equal(r.code, 0, r.stderr)
    const printed = JSON.parse(r.stdout) as Record<string, unknown>
    assert.deepEqual(printed, { backend: `file://${root}`, prefix: 'cli:', removed: 1, held: 1, kept: 0 })
    assert.ok(!existsSync(done) && existsSync(live) && existsSync(other))
  })
})
