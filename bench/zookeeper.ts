/**
 * The bench's ZooKeeper floor: the lock recipe of the ZooKeeper documentation written directly with
 * `node-zookeeper-client`, the least work the recipe allows. One session per locker, kept open across
 * acquisitions as fencelock keeps its session. Acquire: create an EPHEMERAL_SEQUENTIAL node under the key's
 * node and list the children (pipelined: one round trip); first in sequence order holds, else set an
 * exists-watch on the immediate predecessor and list again once it fires (or at once when the predecessor is
 * already gone). Release: delete the node. So an uncontended cycle is two round trips (create with the
 * listing, delete). No fence,
 * no lost-reply recovery, no session loss handling. Its nodes live under a root of their own, so they never
 * meet fencelock's.
 *
 * No ZooKeeper lock library for Node was found worth comparing as a peer: `zookeeper-lock` and `zk-lock`
 * are not on npm, and `zookeeper-watcher` / `zookeeper-cluster-client` have no lock recipe.
 */
import zookeeper, { type Client, type Event, type Exception } from 'node-zookeeper-client'
import type { Adapter, Env } from './adapter.js'

const ROOT = '/bench-floor'
/** The bench's ttl as the session timeout (the server clamps it to its maximum). */
const SESSION_MS = 30_000

/** node-zookeeper-client's callback calls as promises. */
export const call = <T>(
  run: (done: (error: Error | Exception | null, value: T) => void) => void,
): Promise<T> =>
  new Promise<T>((resolve, reject) =>
    run((error, value) => (error ? reject(error as Error) : resolve(value))),
  )
export const isNoNode = (error: unknown) => (error as Exception).code === zookeeper.Exception.NO_NODE

/** The sequence ZooKeeper appended: the 10 digits after the last `-`. */
export const sequence = (name: string) => name.slice(name.lastIndexOf('-') + 1)

/** A connected session on the bench's ZooKeeper, of `sessionMs` (the server clamps it to its bounds). */
export async function connected(env: Env, sessionMs = SESSION_MS): Promise<Client> {
  if (env.zookeeper === '') throw new Error('no zookeeper store was started')
  const client = zookeeper.createClient(env.zookeeper, { sessionTimeout: sessionMs, retries: 0 })
  await new Promise<void>((resolve) => {
    client.once('connected', resolve)
    client.connect()
  })
  return client
}

const zookeeperFloor: Adapter = {
  name: 'raw floor: zookeeper recipe (ephemeral sequential + predecessor watch)',
  store: 'zookeeper',
  kind: 'floor',
  fences: false,
  waits: true,
  note: 'one session per locker; create EPHEMERAL_SEQUENTIAL + getChildren pipelined, delete: 2 round trips a cycle; a waiter sets an exists-watch on its predecessor and lists again when it fires; no fence, no lost-reply recovery',
  async createLocker(env) {
    const client = await connected(env)
    /** Keys whose node this locker already made: the parent exists from then on (nobody deletes it). */
    const made = new Set<string>()
    return {
      async acquire(key) {
        const dir = `${ROOT}/${key}`
        if (!made.has(dir)) {
          await call<string>((done) => client.mkdirp(dir, done))
          made.add(dir)
        }
        // The create and the first listing are pipelined on the session's one connection: ZooKeeper answers
        // a session's requests in order, so the listing sees our node. One round trip, as fencelock's does.
        const created = call<string>((done) =>
          client.create(`${dir}/lock-`, zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL, done),
        )
        let listed: Promise<string[]> | undefined = call<string[]>((done) => client.getChildren(dir, done))
        listed.catch(() => {})
        const path = await created
        const name = path.slice(dir.length + 1)
        for (;;) {
          const children = await (listed ?? call<string[]>((done) => client.getChildren(dir, done)))
          listed = undefined
          children.sort((a, b) => (sequence(a) < sequence(b) ? -1 : sequence(a) > sequence(b) ? 1 : 0))
          const at = children.indexOf(name)
          if (at < 0) throw new Error(`${path} is gone (session expired?)`)
          if (at === 0) {
            return {
              release: async () => {
                await call<void>((done) => client.remove(path, (error) => done(error, undefined)))
              },
            }
          }
          // Watch only the predecessor: a release wakes one waiter, not the herd.
          let fired: () => void = () => {}
          const changed = new Promise<void>((resolve) => {
            fired = resolve
          })
          const stat = await call<unknown>((done) =>
            client.exists(`${dir}/${children[at - 1]}`, (_event: Event) => fired(), done),
          ).catch((error: unknown) => {
            if (isNoNode(error)) return null
            throw error
          })
          // exists answers null (no error) for a node already gone: list again at once.
          if (stat) await changed
        }
      },
      close: async () => client.close(),
    }
  },
}

export const ZOOKEEPER_ADAPTERS: Adapter[] = [zookeeperFloor]
