import assert from 'node:assert/strict'
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { after, before, describe, it } from 'node:test'
import { promisify } from 'node:util'
import { Etcd3 } from 'etcd3'
import { lockPrefix } from '../../../src/backends/etcd/layout.js'
import {
  BackendUnavailableError,
  createLockClient,
  type LockClient,
  LockLostError,
  LockNotAcquiredError,
} from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { assertSuccessiveHolds, type Hold } from '../../support/holds.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { abortedWithin, pollUntil } from '../../support/wait.js'

/** `etcdctl lock <name> [command…]`, started against the cluster; resolves once it printed `ready`. */
function etcdctlLock(cluster: EtcdCluster, name: string, command: string[] = []) {
  const child: ChildProcess = spawn('etcdctl', ['--endpoints', cluster.endpoints, 'lock', name, ...command], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
  })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  return {
    child,
    exited,
    output: () => output,
    /** Until its output contains `text`, or throws after `ms`. */
    async printed(text: string, ms: number) {
      const deadline = Date.now() + ms
      while (!output.includes(text)) {
        if (Date.now() > deadline)
          throw new Error(`etcdctl did not print "${text}" within ${ms} ms: ${output}`)
        await sleep(20)
      }
    },
  }
}

describe('etcd: interop, revoked leases', { timeout: 120_000 }, () => {
  let cluster: EtcdCluster
  const open: LockClient[] = []
  const client = (options: Parameters<typeof createLockClient>[1] = {}) => {
    const c = createLockClient(cluster.url(), options)
    open.push(c)
    return c
  }
  before(async () => {
    cluster = await startEtcd(3)
  })
  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    await cluster.destroy()
  })

  it('excludes `etcdctl lock` (Go concurrency.Mutex) on the same name, both ways', async () => {
    const locks = client({ ttl: '5s' })
    // etcdctl holds fencelock/interop-a: fencelock must wait.
    const go = etcdctlLock(cluster, 'fencelock/interop-a')
    try {
      await go.printed('fencelock/interop-a/', 10_000)
      assert.equal(await locks.tryAcquire('interop-a'), null, 'fencelock took a lock etcdctl holds')
      const waiting = awaitLater(locks.acquire('interop-a', { timeout: '10s' }))
      await sleep(300)
      go.child.kill('SIGINT')
      const lock = await waiting
      await lock.release()
    } finally {
      go.child.kill('SIGKILL')
    }
    // fencelock holds fencelock/interop-b: etcdctl must wait until fencelock releases.
    const lock = await locks.acquire('interop-b')
    const other = etcdctlLock(cluster, 'fencelock/interop-b', ['echo', 'etcdctl-got-it'])
    try {
      await sleep(700)
      assert.doesNotMatch(other.output(), /etcdctl-got-it/, 'etcdctl took a lock fencelock holds')
      await lock.release()
      await other.printed('etcdctl-got-it', 10_000)
      assert.equal(await other.exited, 0)
    } finally {
      other.child.kill('SIGKILL')
    }
  })

  it("a lease revoked behind the holder's back aborts lock.signal promptly", async () => {
    const locks = client({ ttl: '6s' })
    const lock = await locks.acquire('revoked')
    const admin = new Etcd3({ hosts: cluster.members.map((m) => `http://${m.endpoint}`) })
    try {
      const [kv] = await admin
        .getAll()
        .prefix('fencelock/revoked/')
        .exec()
        .then((r) => r.kvs)
      assert.ok(kv, 'our key is under the lock prefix')
      const leaseHex = BigInt(kv.lease).toString(16)
      await promisify(execFile)('etcdctl', ['--endpoints', cluster.endpoints, 'lease', 'revoke', leaseHex])
      // The keep-alive every ttl/3 (2 s) hears it first; the renewal would be later. Generous bound.
      const reason = await abortedWithin(lock.signal, 5000)
      assert.ok(reason instanceof LockLostError, `expected LockLostError, got ${reason}`)
      // The next holder gets it at once: the key went with the lease.
      const next = await client({ ttl: '6s' }).acquire('revoked', { timeout: '5s' })
      assert.ok(next.fence > lock.fence)
      await next.release()
    } finally {
      admin.close()
      await lock.release().catch(() => {})
    }
  })

  it('a waiter whose key was deleted while it waited is never granted on it (Jepsen etcd #11456)', async () => {
    const key = 'waiter-key-gone'
    const holder = await client({ ttl: '6s' }).acquire(key)
    const admin = new Etcd3({ hosts: cluster.members.map((m) => `http://${m.endpoint}`) })
    try {
      const keys = async () => (await admin.getAll().prefix(`fencelock/${key}/`).exec()).kvs
      const waiting = awaitLater(client({ ttl: '6s' }).acquire(key, { timeout: '20s' }))
      // The waiter's key is the one that is not the holder's; wait (bounded) until it is in line.
      const waiterKey = async () =>
        (await keys()).find((k) => !k.value.toString().startsWith(`${holder.owner} `))
      const kv = await pollUntil(waiterKey, Boolean, { withinMs: 10_000, everyMs: 20 })
      assert.ok(kv, 'the waiter never put its key')
      const gone = { key: kv.key.toString(), revision: BigInt(kv.create_revision) }
      // Until the waiter's fallback poll (which would notice the deletion on its own) is ~1 s apart.
      await sleep(2000)
      // Its lease dying would do this. The waiter watches the holder's key, not its own, and the holder
      // leaves at once: the waiter's wake-up is the first it hears of either.
      await admin.delete().key(gone.key).exec()
      await holder.release()
      // Someone else comes for the lock: a waiter granted on its deleted key would hold it without a key,
      // so the newcomer would find nobody in line and take it too.
      const later = client({ ttl: '6s' }).acquire(key, { timeout: '20s' })
      const settled = new Set<string>()
      const track = (name: string, p: Promise<unknown>) => {
        const done = () => settled.add(name)
        p.then(done, done)
      }
      track('waiting', waiting)
      track('later', later)
      const first = await Promise.race([waiting, later])
      await sleep(300)
      assert.equal(settled.size, 1, 'both were granted: two holders')
      await first.release()
      const second = await (settled.has('waiting') ? later : waiting)
      assert.ok(second.fence > first.fence)
      const waiter = await waiting
      assert.ok(waiter.fence > gone.revision, `granted on its deleted key (fence ${waiter.fence})`)
      await second.release()
    } finally {
      admin.close()
    }
  })
})

/**
 * Member faults, under both raft timings: the fast one of the other tests, and etcd's defaults (what
 * deployments run), under which a leader's loss outlives more of a client's calls (a release's among them).
 */
for (const raft of ['fast', 'defaults'] as const) {
  describe(`etcd member faults (raft timing: ${raft})`, { timeout: 180_000 }, () => {
    let cluster: EtcdCluster
    const open: LockClient[] = []
    const client = (options: Parameters<typeof createLockClient>[1] = {}) => {
      const c = createLockClient(cluster.url(), options)
      open.push(c)
      return c
    }
    before(async () => {
      cluster = await startEtcd(3, { raft })
    })
    after(async () => {
      await Promise.all(open.map((c) => c.close()))
      await cluster.destroy()
    })

    it('a release lost to a leader crash leaves no key ahead of a waiter of the same client', async () => {
      const key = 'release-in-leader-crash'
      // Long enough that the waiter outlives the outage (the core gives up on a store unavailable for
      // longer than a ttl; etcd3 on a lease without answered keep-alives for two), so that it keeps the
      // session alive throughout: the release fails within etcd3's 5 s call deadline.
      const locks = client({ ttl: '20s' })
      const lock = await locks.acquire(key)
      // A waiter of the same client: its key is on the same session as the holder's.
      const waiting = locks.acquire(key, { timeout: '45s' })
      const waited = waiting.then(
        (l) => ({ lock: l, at: performance.now() }),
        (error: unknown) => ({ error }),
      )
      const admin = new Etcd3({ hosts: cluster.members.map((m) => `http://${m.endpoint}`) })
      const leader = await cluster.leader()
      const follower = cluster.members.find((m) => m !== leader)!
      try {
        const keys = async () => (await admin.getAll().prefix(lockPrefix(key)).keys()).length
        await pollUntil(keys, (n) => n === 2, { withinMs: 10_000, everyMs: 20 })
        // The leader dies during the release, and a follower stays paused until the release has failed,
        // so no quorum can commit the delete whatever the election's timing.
        follower.signal('SIGSTOP')
        leader.signal('SIGKILL')
        try {
          await assert.rejects(lock.release(), BackendUnavailableError)
        } finally {
          follower.signal('SIGCONT')
        }
        const backAt = performance.now()
        const restarted = leader.restart()
        restarted.catch(() => {})
        // Its key must go once etcd answers again (well within the ttl the release's error promises),
        // and the waiter behind it is granted. It used to stay as long as the waiter kept the session
        // alive: for ever with the default timeout.
        const outcome = await waited
        assert.ok('lock' in outcome, `the waiter was not granted: ${'error' in outcome && outcome.error}`)
        assert.ok(outcome.lock.fence > lock.fence)
        assert.ok(
          outcome.at - backAt < 20_000,
          `granted ${Math.round(outcome.at - backAt)} ms after etcd was back`,
        )
        await outcome.lock.release()
        // Nobody is left in line: another client takes it at once.
        const other = await client({ ttl: '20s' }).acquire(key, { timeout: '10s' })
        await other.release()
        await restarted
      } finally {
        admin.close()
        follower.signal('SIGCONT')
        if (!(await leader.healthy())) await leader.restart()
      }
    })

    it('killing the leader while locks are held and contended: no double grant, fences increase, waiters go on', async () => {
      const key = 'leader-crash'
      const holds: Hold[] = []
      const until = performance.now() + 6000
      let failures = 0
      const workers = Array.from({ length: 5 }, () => client({ ttl: '4s' }))
      const leader = await cluster.leader()
      const killedAt = performance.now() + 1500
      const crash = (async () => {
        await sleep(1500)
        leader.signal('SIGKILL')
      })()
      await Promise.all(
        workers.map(async (locks) => {
          while (performance.now() < until) {
            let lock: Awaited<ReturnType<typeof locks.acquire>>
            try {
              lock = await locks.acquire(key, { timeout: '10s' })
            } catch (error) {
              // A lost quorum member makes calls fail for a moment; the point is what never happens below.
              assert.ok(!(error instanceof LockNotAcquiredError), `gave up waiting: ${error}`)
              failures++
              await sleep(50)
              continue
            }
            const start = performance.now()
            await sleep(Math.random() * 5)
            holds.push({ fence: lock.fence, start, end: performance.now() })
            await lock.release().catch(() => {})
          }
        }),
      )
      await crash
      await leader.restart()
      assertSuccessiveHolds(holds)
      const after = holds.filter((h) => h.start > killedAt + 500).length
      assert.ok(after >= 5, `only ${after} grants after the leader was killed (${failures} failed calls)`)
    })
  })
}
