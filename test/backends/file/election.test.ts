/**
 * Leader election on the file backend (src/backends/file/election/): the layout on disk, the namespace
 * apart from locks (no lock, list or prune sees an election), proclaim refused after a takeover, a killed
 * leader process replaced at once, terms that keep growing after the election's folder was retired or
 * swept, and the observer's watch (woken by a change, not again and again by nothing). The generic cases
 * are the conformance suite's. Real folders and processes; no mocks.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { ELECTION_FOLDER } from '../../../src/backends/file/election/index.js'
import { highest, keyFolderName } from '../../../src/backends/file/generations.js'
import { type FileTestHooks, fileBackend } from '../../../src/backends/file/index.js'
import { createLockClient, LockLostError } from '../../../src/index.js'
import { tempDir } from '../../support/temp.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'

const LEADER = fileURLToPath(new URL('../../fixtures/election-leader.js', import.meta.url))

const dir = tempDir('file-election')
after(() => dir.cleanup())

const newRoot = () => join(dir.path, randomBytes(4).toString('hex'))
const name = (label: string) => `${label}:${randomBytes(3).toString('hex')}`
/** The key folders of a lock root (`.epoch`, `.boot`, `.elections` are not). */
const keyFolders = (root: string) => readdirSync(root).filter((entry) => entry.includes('~'))
/** The current record of `folder` (its highest generation), parsed. */
function currentRecord(folder: string): Record<string, unknown> {
  const gen = highest(readdirSync(folder))
  return JSON.parse(readFileSync(join(folder, String(gen).padStart(20, '0')), 'utf8'))
}
const electionFolder = (root: string, election: string) =>
  join(root, ELECTION_FOLDER, keyFolderName(election))

const clientOn = (root: string, hooks?: FileTestHooks) =>
  createLockClient(fileBackend({ dir: root }, hooks), { ttl: '20s' })

describe('file backend: leader election', () => {
  it('keeps an election in <root>/.elections/<key folder>, its record holding the value and the term', async () => {
    const root = newRoot()
    const client = clientOn(root)
    try {
      const election = name('layout')
      const lead = await client.election(election).campaign({ value: 'http://10.0.0.7:8080 é 🗳' })
      const folder = electionFolder(root, election)
      const record = currentRecord(folder)
      assert.equal(record.state, 'held')
      assert.equal(record.key, election)
      assert.equal(record.value, 'http://10.0.0.7:8080 é 🗳')
      assert.equal(record.fence, lead.term.toString())
      // Its own epoch counter; nothing of it among the lock root's key folders.
      assert.ok(existsSync(join(root, ELECTION_FOLDER, '.epoch')))
      assert.deepEqual(keyFolders(root), [])
      await lead.proclaim('second')
      assert.equal(currentRecord(folder).value, 'second')
      await lead.resign()
      assert.equal(currentRecord(folder).state, 'free')
    } finally {
      await client.close()
    }
  })

  it('an election and a lock of the same name are independent; list and prune see no election', async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const client = createLockClient(backend, { ttl: '20s' })
    try {
      const shared = name('same')
      const lead = await client.election(shared).campaign({ value: 'v' })
      // The lock of that very name is free, and is granted while the election is led.
      assert.equal((await client.inspect(shared))?.held ?? false, false)
      const lock = await client.acquire(shared, { timeout: 0 })
      assert.equal((await client.election(shared).leader()).leader, true)
      const listed = []
      for await (const held of client.list('')) listed.push(held.key)
      assert.deepEqual(listed, [shared], 'the lock alone is listed')
      await lock.release()
      const other = name('ended')
      await (await client.election(other).campaign({ value: 'w' })).resign()
      // prune removes ended key folders of the lock root: never the elections'.
      await backend.prune()
      assert.ok(existsSync(electionFolder(root, other)), 'an ended election is not pruned')
      assert.ok(existsSync(electionFolder(root, shared)))
      assert.equal((await client.election(shared).leader()).leader, true)
      await lead.resign()
    } finally {
      await client.close()
    }
  })

  it('refuses a proclaim after another candidate took over, and leaves the new value on disk', async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const [a, b] = [createLockClient(backend, { ttl: '20s' }), clientOn(root)]
    try {
      const election = name('takeover')
      const old = await a.election(election).campaign({ value: 'old' })
      // Ended behind its back (an operator's break), then taken by another process's client.
      assert.equal((await backend.election.breakLock(election)).broken, true)
      const next = await b.election(election).campaign({ value: 'new', timeout: '20s' })
      assert.ok(next.term > old.term)
      await assert.rejects(old.proclaim('stale'), LockLostError)
      const record = currentRecord(electionFolder(root, election))
      assert.equal(record.value, 'new')
      assert.equal(record.fence, next.term.toString())
      await next.resign()
    } finally {
      await Promise.all([a.close(), b.close()])
    }
  })

  it('replaces a leader whose process was killed at once, not at the end of its 60 s lease', async () => {
    const root = newRoot()
    const election = name('killed')
    const child = spawn(process.execPath, [LEADER, root, election, 'child'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    const client = clientOn(root)
    try {
      const lines = createInterface({ input: child.stdout })
      const leading = await new Promise<{ term: string }>((resolve, reject) => {
        lines.once('line', (line) => resolve(JSON.parse(line)))
        child.once('exit', () => reject(new Error('the leader process exited before leading')))
      })
      assert.equal((await client.election(election).leader()).leader, true)
      // A candidate already waiting (no write announces a death) and an observer's next read both see it.
      const waiting = client.election(election).campaign({ value: 'next', timeout: '30s' })
      waiting.catch(() => {})
      child.kill('SIGKILL')
      await exited
      const lead = await waiting
      assert.ok(lead.term > BigInt(leading.term))
      assert.equal(lead.value, 'next')
      await lead.resign()
      assert.equal((await client.election(election).leader()).leader, false)
    } finally {
      child.kill('SIGKILL')
      await client.close()
    }
  })

  it('a leader process killed is a vacancy on the next read of an observer', async () => {
    const root = newRoot()
    const election = name('vacancy')
    const child = spawn(process.execPath, [LEADER, root, election, 'child'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
    const client = clientOn(root)
    try {
      await new Promise<void>((resolve, reject) => {
        createInterface({ input: child.stdout }).once('line', () => resolve())
        child.once('exit', () => reject(new Error('the leader process exited before leading')))
      })
      assert.equal((await client.election(election).leader()).leader, true)
      child.kill('SIGKILL')
      await exited
      assert.equal((await client.election(election).leader()).leader, false)
    } finally {
      child.kill('SIGKILL')
      await client.close()
    }
  })

  it('terms keep growing after the election folder was retired', async () => {
    const root = newRoot()
    const client = clientOn(root, { retireAfterMs: 0 })
    try {
      const election = name('retired')
      const first = await client.election(election).campaign({ value: 'a' })
      await first.resign()
      const folder = electionFolder(root, election)
      await waitUntil(() => !existsSync(folder), 'the released election folder to be retired', {
        withinMs: 30_000,
      })
      const second = await client.election(election).campaign({ value: 'b' })
      assert.ok(second.term > first.term, `${second.term} > ${first.term}`)
      await second.resign()
    } finally {
      await client.close()
    }
  })

  it('terms keep growing after the election folder was swept', async () => {
    const root = newRoot()
    const backend = fileBackend(
      { dir: root },
      { retireAfterMs: Number.POSITIVE_INFINITY, sweepAfterMs: 0, sweepEveryMs: 0 },
    )
    const client = createLockClient(backend, { ttl: '20s' })
    try {
      const election = name('swept')
      const first = await client.election(election).campaign({ value: 'a' })
      first.signal.addEventListener('abort', () => {})
      // Ended by a break (not released by this process: the retirer leaves it to the sweep).
      await backend.election.breakLock(election)
      const folder = electionFolder(root, election)
      // Grants of other elections sweep the elections' root now and then.
      await waitUntil(
        async () => {
          await (await client.election(name('trigger')).campaign({ value: 't' })).resign()
          return !existsSync(folder)
        },
        'the ended election folder to be swept',
        { withinMs: 30_000, everyMs: 50 },
      )
      const second = await client.election(election).campaign({ value: 'b' })
      assert.ok(second.term > first.term, `${second.term} > ${first.term}`)
      await second.resign()
    } finally {
      await client.close()
    }
  })

  it("an observer's watch wakes on a proclaim, and not again and again when nothing changed", async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const client = createLockClient(backend, { ttl: '20s' })
    const facet = backend.election
    try {
      const election = name('watch')
      const lead = await client.election(election).campaign({ value: 'one' })
      const stop = new AbortController()
      // Twice: a watch armed again on a folder this process watched before, right after a change (the
      // old generation being collected, events queued before it was armed), must not wake on any of it.
      for (const value of ['two', 'three']) {
        let woke = false
        const watching = facet.watch(election, stop.signal).then(() => {
          woke = true
        })
        // Reads of the record (an observer's own) are no news either.
        for (let i = 0; i < 5; i++) {
          await facet.inspect(election, stop.signal)
          await sleep(20)
        }
        await sleep(200)
        assert.equal(woke, false, 'the watch stays pending while nothing changes')
        await lead.proclaim(value)
        // Polled with a timer: the watch alone (not persistent) would not keep this process running.
        await waitUntil(() => woke, 'the watch to wake on the proclaim', { withinMs: 20_000 })
        await watching
        assert.equal((await facet.inspect(election, stop.signal))?.value, value)
      }
      await lead.resign()
      stop.abort()
    } finally {
      await client.close()
    }
  })

  it("an observer's watch of an election with no folder yet wakes when a candidate makes it", async () => {
    const root = newRoot()
    const backend = fileBackend({ dir: root })
    const client = createLockClient(backend, { ttl: '20s' })
    try {
      // The root exists (another election made .elections/), this election's folder does not.
      await (await client.election(name('other')).campaign({ value: 'x' })).resign()
      const election = name('later')
      const stop = new AbortController()
      let woke = false
      const watching = backend.election.watch(election, stop.signal).then(() => {
        woke = true
      })
      await sleep(300)
      assert.equal(woke, false, 'no folder is no news')
      const lead = await client.election(election).campaign({ value: 'v' })
      await waitUntil(() => woke, 'the watch to wake on the new folder', { withinMs: 20_000 })
      await watching
      await lead.resign()
      stop.abort()
    } finally {
      await client.close()
    }
  })

  it('makes .elections shared (1777) in a lock root several users share', async () => {
    const root = newRoot()
    const { mkdirSync, chmodSync } = await import('node:fs')
    mkdirSync(root)
    chmodSync(root, 0o1777)
    const client = clientOn(root)
    try {
      const lead = await client.election(name('shared')).campaign({ value: 'v' })
      assert.equal(statSync(join(root, ELECTION_FOLDER)).mode & 0o7777, 0o1777)
      await lead.resign()
    } finally {
      await client.close()
    }
  })
})
