import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import * as etcd3 from 'etcd3'
import { etcdBackend } from '../../../src/backends/etcd/index.js'
import type { AcquireRequest, LockBackend } from '../../../src/core/backend.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { type EtcdCluster, startEtcd } from '../../servers/etcd.js'
import { awaitLater } from '../../support/later.js'
import { sleep } from '../../support/time.js'
import { pollUntil } from '../../support/wait.js'

/**
 * An acquire aborted while its transaction, its reply, the keep-alive beside it or a hand-over is under
 * way leaves nothing behind, even though its client lives on and keeps its sessions alive (issue 11.2):
 * another client takes the lock at once, far within the victim's 30 s ttl.
 *
 * The conformance suite's abandon case closes the victim's client, whose sessions' revocation deletes
 * whatever was left; here the victim's client stays open to the end.
 */
const POINTS = [
  /** While the session's lease is being granted: nothing was sent yet. */
  'before-send',
  /** Right after the acquire's transaction went out: etcd applies it; the reply comes to nobody. */
  'sent',
  /** Right after the reply granting the lock arrived, before the backend read it. */
  'replied',
  /** Right after the reply that put us in line behind a holder arrived. */
  'replied-in-line',
  /** As a release hands the lock over to the waiting acquire (`waitForChange` resolves with a grant). */
  'hand-over',
] as const
type Point = (typeof POINTS)[number]

describe(
  'etcd: an aborted acquire leaves nothing behind while its client lives',
  { timeout: 120_000 },
  () => {
    let cluster: EtcdCluster
    let admin: etcd3.Etcd3
    const open: LockClient[] = []
    const closers: Array<() => void> = []

    before(async () => {
      cluster = await startEtcd(1)
      admin = new etcd3.Etcd3({ hosts: cluster.endpoints })
    })
    after(async () => {
      await Promise.all(open.map((c) => c.close()))
      for (const close of closers) close()
      admin.close()
      await cluster.destroy()
    })

    /**
     * A victim client whose backend aborts `controller` at `point`. The etcd3 client is the real one; only
     * its `kv.txn` and `lease` are observed (each call still goes to etcd unchanged) to find the moment.
     */
    /** Which path delivered each hand-over (the wait, or a poll that found us first). */
    const handedBy: string[] = []
    /** Resolves after the victim's next refused attempt (a poll while it waits in line). */
    let nextRefusal: () => Promise<void> = async () => {}

    const victim = (point: Point, controller: AbortController) => {
      const etcd = new etcd3.Etcd3({ hosts: cluster.endpoints })
      closers.push(() => etcd.close())
      const abort = () => controller.abort(new Error(`aborted at ${point}`))
      const lease = etcd.lease.bind(etcd)
      etcd.lease = (ttl, options) => {
        if (point === 'before-send') abort()
        return lease(ttl, options)
      }
      const txn = etcd.kv.txn.bind(etcd.kv)
      etcd.kv.txn = (req) => {
        const isAcquire = req.success?.some((op) => 'request_put' in op) && req.compare?.length === 1
        const sent = txn(req)
        if (!isAcquire || controller.signal.aborted) return sent
        if (point === 'sent') abort()
        return sent.then((reply) => {
          // The put reads the two newest keys of the lock: ours, and the one before it when we are in line.
          const granted = reply.succeeded && reply.responses[1]?.response_range.kvs.length === 1
          if (point === 'replied' || (point === 'replied-in-line' && !granted)) abort()
          return reply
        })
      }
      const inner = etcdBackend({ client: etcd })
      // A hand-over reaches the waiter through its wait (usually: the release's delete wakes it) or through
      // its next poll, whichever comes first; the abort comes with it either way.
      let refused = false
      const onRefused: Array<() => void> = []
      nextRefusal = () => new Promise<void>((resolve) => onRefused.push(resolve))
      const backend: LockBackend = {
        ...inner,
        async tryAcquire(req: AcquireRequest, signal: AbortSignal) {
          const result = await inner.tryAcquire(req, signal)
          if (point === 'hand-over' && refused && result.granted) {
            handedBy.push('poll')
            abort()
          }
          if (!result.granted) {
            refused = true
            for (const wake of onRefused.splice(0)) wake()
          }
          return result
        },
        async waitForChange(req: AcquireRequest, signal: AbortSignal) {
          const result = await inner.waitForChange!(req, signal)
          if (point === 'hand-over' && result?.granted) {
            handedBy.push('wait')
            abort()
          }
          return result
        },
      }
      const locks = createLockClient(backend, { ttl: '30s' })
      open.push(locks)
      return locks
    }

    for (const point of POINTS) {
      it(`aborted at ${point}: another client takes the lock at once`, async () => {
        const key = `abandon-${point}`
        const others = createLockClient(cluster.url(), { ttl: '30s' })
        open.push(others)
        const contended = point === 'replied-in-line' || point === 'hand-over'
        const holder = contended ? await others.acquire(key) : undefined
        const controller = new AbortController()
        const locks = victim(point, controller)
        const pending = awaitLater(locks.acquire(key, { signal: controller.signal, timeout: '20s' }))
        if (point === 'hand-over') {
          // Released once the victim is in line (its key is under the prefix, behind the holder's), its
          // polls have backed off to a second, and one of them was just refused: the next is at least half
          // a second away, and the release's delete wakes the wait (which hands over) within milliseconds.
          // Should a poll come first all the same, it is interrupted just as well.
          const inLine = () => admin.getAll().prefix(`fencelock/${key}/`).keys()
          await pollUntil(inLine, (keys) => keys.length === 2, { withinMs: 10_000, everyMs: 20 })
          await sleep(2500)
          await nextRefusal()
          await holder!.release()
        }
        const outcome = await pending.then(
          () => 'granted',
          (error: unknown) => error,
        )
        assert.ok(outcome instanceof Error && /aborted at/.test(outcome.message), `${point}: ${outcome}`)
        if (point === 'replied-in-line') await holder!.release()
        // The victim's client is still open, its sessions kept alive: only the clean-up can have freed it.
        const next = await others
          .acquire(key, { timeout: '5s' })
          .catch((error: unknown) => assert.fail(`${point}: the key stayed held after the abort: ${error}`))
        const keys = await admin.getAll().prefix(`fencelock/${key}/`).strings()
        assert.deepEqual(
          // Each value is "<owner> <holder description>".
          Object.values(keys).map((value) => value.split(' ')[0]),
          [next.owner],
          `${point}: keys left under the lock: ${Object.keys(keys)}`,
        )
        await next.release()
        if (point === 'hand-over') console.log(`# hand-over delivered by: ${handedBy.join(', ')}`)
      })
    }
  },
)
