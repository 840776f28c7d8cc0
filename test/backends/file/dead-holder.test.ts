/**
 * The file backend frees a lease whose holder's processes are all gone, at once (as flock(1) does), and
 * never one whose holder lives: a process killed with SIGKILL, a pid reused by another process, a record
 * from another pid namespace, a paused holder, and `holderPids: []`.
 */
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { genName, keyFolderName } from '../../../src/backends/file/generations.js'
import { type HolderProcesses, markProcesses, pidNamespace } from '../../../src/backends/file/holders.js'
import { bootId, monotonicMs } from '../../../src/backends/file/host-clock.js'
import { fileBackend } from '../../../src/backends/file/index.js'
import { newRecord } from '../../../src/backends/file/mutex/records.js'
import { createLockClient } from '../../../src/index.js'
import { startHold } from '../../support/processes.js'
import { tempDir } from '../../support/temp.js'

const dir = tempDir('file-dead-holder')
after(() => dir.cleanup())
const locks = join(dir.path, 'locks')
const url = pathToFileURL(locks).href
let n = 0
const key = (label: string) => `dead-${label}-${n++}`

/** Writes generation 1 of `key` by hand: a lease held for a minute, living with `processes`. */
function forgeHeld(k: string, processes: HolderProcesses | undefined): bigint {
  const folder = join(locks, keyFolderName(k))
  mkdirSync(folder, { recursive: true })
  const fence = 1000n
  const record = newRecord(
    {
      key: k,
      state: 'held',
      owner: 'someone-else',
      fence,
      base: fence - 1n,
      deadline: monotonicMs() + 60_000,
      processes,
    },
    bootId(),
  )
  writeFileSync(join(folder, genName(1n)), JSON.stringify(record))
  return fence
}

/** The pid of a process that has exited and been reaped. */
function deadPid(): number {
  const r = spawnSync('sh', ['-c', 'echo $$'], { encoding: 'utf8' })
  return Number(r.stdout.trim())
}

describe('file backend: a lease ends with its holder process', () => {
  it('a holder killed with SIGKILL frees its lock at once, not after its 60 s ttl; the fence goes on', async () => {
    const k = key('killed')
    const holder = startHold(url, k, ['--ttl', '60s'])
    const acquired = await holder.next('acquired')
    const client = createLockClient(url)
    try {
      // A waiter already waiting (its watch hears nothing of a death) and a fresh acquire both get it.
      const waiting = client.acquire(k, { timeout: '20s' })
      waiting.catch(() => {})
      holder.child.kill('SIGKILL')
      await holder.exited
      const lock = await waiting
      assert.ok(lock.fence > BigInt(acquired.fence as string), 'the next grant has a greater fence')
      await lock.release()
    } finally {
      await client.close()
    }
  })

  it('a live holder is never freed, also while it is paused (SIGSTOP)', async () => {
    const k = key('live')
    const holder = startHold(url, k, ['--ttl', '60s'])
    await holder.next('acquired')
    const client = createLockClient(url)
    try {
      assert.equal(await client.tryAcquire(k), null)
      holder.child.kill('SIGSTOP')
      try {
        assert.equal(await client.tryAcquire(k), null, 'a paused holder still lives')
        assert.equal((await client.inspect(k)).held, true)
      } finally {
        holder.child.kill('SIGCONT')
      }
      holder.send('release')
      assert.equal(await holder.exited, 0)
    } finally {
      await client.close()
    }
  })

  it('a pid reused by a process with another start time counts as gone', async () => {
    const k = key('reused')
    const ours = markProcesses([process.pid])!
    // This very process, but started at another time: the recorded holder is not us, it has exited.
    const fence = forgeHeld(k, { ns: ours.ns, marks: [{ pid: process.pid, start: '1' }] })
    const client = createLockClient(url)
    try {
      assert.equal((await client.inspect(k)).held, false)
      const lock = await client.tryAcquire(k)
      assert.ok(lock, 'the reused pid was taken for the holder')
      assert.ok(lock.fence > fence)
      await lock.release()
    } finally {
      await client.close()
    }
  })

  it('frees a lease whose every process has exited, keeps one while any of them lives', async () => {
    const ns = pidNamespace()!
    const client = createLockClient(url)
    try {
      const gone = key('all-gone')
      forgeHeld(gone, { ns, marks: [{ pid: deadPid(), start: '1' }] })
      const lock = await client.tryAcquire(gone)
      assert.ok(lock, 'every process of the lease had exited')
      await lock.release()
      const oneLives = key('one-lives')
      forgeHeld(oneLives, {
        ns,
        marks: [{ pid: deadPid(), start: '1' }, ...markProcesses([process.pid])!.marks],
      })
      assert.equal(await client.tryAcquire(oneLives), null, 'one of its processes still runs')
    } finally {
      await client.close()
    }
  })

  it('in doubt the ttl decides: another pid namespace, or no processes recorded', async () => {
    const client = createLockClient(url)
    try {
      const foreign = key('namespace')
      // A container sharing the folder: its pids are not ours, whatever they name here.
      forgeHeld(foreign, { ns: 'pid:[1]', marks: [{ pid: deadPid(), start: '1' }] })
      assert.equal(await client.tryAcquire(foreign), null)
      assert.equal((await client.inspect(foreign)).held, true)
      const older = key('older')
      forgeHeld(older, undefined)
      assert.equal(await client.tryAcquire(older), null)
    } finally {
      await client.close()
    }
  })

  it('holderPids: [] leaves the lease to its ttl; the default records this process', async () => {
    const record = async (holderPids: number[] | undefined) => {
      const k = key('pids')
      const client = createLockClient(fileBackend({ dir: locks, holderPids }))
      try {
        const lock = await client.acquire(k)
        const folder = join(locks, keyFolderName(k))
        const [name] = readdirSync(folder).filter((f) => /^\d+$/.test(f))
        const written = JSON.parse(readFileSync(join(folder, name!), 'utf8'))
        await lock.release()
        return written.processes
      } finally {
        await client.close()
      }
    }
    assert.equal(await record([]), undefined)
    assert.deepEqual(await record(undefined), markProcesses([process.pid]))
    assert.throws(() => fileBackend({ dir: locks, holderPids: [0] }), /holderPids/)
  })
})
