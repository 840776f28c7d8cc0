import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import type { Client } from 'node-zookeeper-client'
import { fourLetterWord } from '../../../src/backends/zookeeper/four-letter.js'
import { inLine, LEASE_NAME, semaphoreLeases } from '../../../src/backends/zookeeper/layout.js'
import { createLockClient, type HeldPermits, type LockClient } from '../../../src/index.js'
import { connectAdmin } from '../../kits/zookeeper.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../../servers/zookeeper.js'
import { awaitLater } from '../../support/later.js'
import { pollUntil } from '../../support/wait.js'

/**
 * How a ZooKeeper semaphore's waiters wait (src/backends/zookeeper/semaphore-watch.ts): the first waiting
 * lease watches the line, every later one the waiting lease just ahead of its own, so a release wakes one
 * waiter, not all; and a release anywhere in the line (not only at its head) admits the first waiter at
 * once, not at a waiter's periodic read. Each waiter is a client of its own (its own session), as the
 * server counts watches per session (`wchp`).
 */
const WITHIN = { withinMs: 30_000, everyMs: 50 }
const PREFIX = '/fencelock-semaphore-waiting'
/**
 * How soon a waiter must be admitted after the release that frees its permits. A waiter that missed the
 * release finds it at its own read of the line, once per recheck interval: with a ttl of 30 s, 15 to 30 s
 * (engines/queue/line.ts), well beyond this bound; a watch brings it in milliseconds.
 */
const PROMPTLY_MS = 8000

describe('zookeeper: semaphore waiters', { timeout: 180_000 }, () => {
  let zk: ZooKeeperEnsemble
  let admin: Client
  const open: LockClient[] = []

  before(async () => {
    zk = await startZooKeeper(1)
    admin = (await connectAdmin(zk.connectString, { sessionTimeout: 10_000 })) as Client
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    admin.close()
    await zk.destroy()
  })

  const clientOn = () => {
    const client = createLockClient(zk.url(PREFIX), { ttl: '30s' })
    open.push(client)
    return client
  }
  const childrenOf = (path: string) =>
    new Promise<string[]>((resolve) => admin.getChildren(path, (error, names) => resolve(error ? [] : names)))
  /** The lease paths of `leases` in line order. */
  const lineOf = async (leases: string) =>
    inLine(await childrenOf(leases), LEASE_NAME).map((child) => `${leases}/${child}`)
  /** The sessions watching each path, as the server's `wchp` lists them. */
  const watchers = async () => {
    const member = zk.members[0]!
    const text = await fourLetterWord('127.0.0.1', member.clientPort, 'wchp', AbortSignal.timeout(10_000))
    const byPath = new Map<string, number>()
    let path = ''
    for (const line of text.split('\n')) {
      if (line.startsWith('/')) path = line
      else if (line.startsWith('\t')) byPath.set(path, (byPath.get(path) ?? 0) + 1)
    }
    return byPath
  }
  /** Starts an acquire of one permit on a client of its own; resolves once its lease is in line. */
  const enter = async (name: string, limit: number, inLine: number) => {
    const acquire = awaitLater(clientOn().semaphore(name, { limit }).acquire({ timeout: '120s' }))
    await pollUntil(
      () => lineOf(semaphoreLeases(name, PREFIX)),
      (line) => line.length === inLine,
      WITHIN,
    )
    return { acquire }
  }
  /** Resolves with how long `acquire` took from now, or rejects after `PROMPTLY_MS` saying `what`. */
  const promptly = async (acquire: Promise<HeldPermits>, what: string) => {
    const start = performance.now()
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`${what}: not admitted within ${PROMPTLY_MS} ms`)),
        PROMPTLY_MS,
      )
    })
    try {
      const permit = await Promise.race([acquire, late])
      return { permit, ms: performance.now() - start }
    } finally {
      clearTimeout(timer)
    }
  }

  it('watches without a herd: nobody but its holder watches a held lease; each waiter one node', async () => {
    const name = 'herd'
    const leases = semaphoreLeases(name, PREFIX)
    const holder = await clientOn().semaphore(name, { limit: 1 }).acquire()
    const waiting: Promise<HeldPermits>[] = []
    for (let i = 0; i < 4; i++) waiting.push((await enter(name, 1, i + 2)).acquire)
    const line = await lineOf(leases)
    const [held, first, second, third, last] = line as [string, string, string, string, string]
    // Each lease is watched by its own session (its holder's watch on its node); a waiter also by the one
    // behind it. With a herd, all four waiters watched the held lease instead.
    const settled = await pollUntil(
      watchers,
      (by) => line.reduce((sum, path) => sum + (by.get(path) ?? 0), 0) >= 8,
      WITHIN,
    )
    const counts = line.map((path) => settled.get(path) ?? 0)
    assert.equal(
      settled.get(held),
      1,
      `the held lease is watched by ${counts[0]} sessions (${counts.join(', ')})`,
    )
    assert.deepEqual(
      [first, second, third, last].map((path) => settled.get(path)),
      [2, 2, 2, 1],
      `each waiter watched by the one behind it (${counts.join(', ')})`,
    )
    await holder.release()
    const { permit } = await promptly(waiting[0]!, 'the first waiter')
    // The next waiter, told of that admission, now waits on the line; the others still on the one ahead.
    const after = await pollUntil(watchers, (by) => by.get(first) === 1, WITHIN)
    assert.deepEqual(
      [first, second, third, last].map((path) => after.get(path)),
      [1, 2, 2, 1],
    )
    await permit.release()
    for (const next of waiting.slice(1)) await (await promptly(next, 'a later waiter')).permit.release()
  })

  it('a release below the head of the line admits the first waiter, and an admitted waiter the next', async () => {
    const name = 'below the head'
    const head = await clientOn().semaphore(name, { limit: 2 }).acquire()
    const below = await clientOn().semaphore(name, { limit: 2 }).acquire()
    const { acquire: first } = await enter(name, 2, 3)
    const { acquire: second } = await enter(name, 2, 4)
    // The head stays: only a lease further down goes.
    await below.release()
    const one = await promptly(first, 'the first waiter, after a release below the head')
    // The second waiter waited for the first, admitted without leaving the line: told of it, it now waits
    // on the line, and the head's release admits it.
    await head.release()
    const two = await promptly(second, 'the second waiter, behind the first one admitted')
    await one.permit.release()
    await two.permit.release()
  })
})
