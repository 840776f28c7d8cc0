/**
 * What the election bench (election-run.ts) measures, as candidates: fencelock on each store that elects
 * (from the kits that declare `election` and have a bench store), etcd3's `Election` (the peer: the recipe of
 * etcd's Go client, ported), and on ZooKeeper a hand-written Curator `LeaderLatch` recipe with the client the
 * backend uses (the floor: the least a latch does). Every candidate is made with the same lease or session
 * length, `ttlMs`. Imported by the runner and by the leader's child process (election-leader.ts).
 */
import { Etcd3 } from 'etcd3'
import zookeeper, { type Event } from 'node-zookeeper-client'
import { createLockClient } from '../src/index.js'
import { KITS } from '../test/kits/index.js'
import type { Env } from './adapter.js'
import { call, isNoNode, sequence } from './zookeeper.js'

/** A leadership won: resign hands it over. */
export interface Won {
  resign(): Promise<void>
}

/** One candidate's client (its own connections), as one process of an application has. */
export interface Candidate {
  /** Resolves once this candidate leads `election` (waiting its turn while another does). */
  campaign(election: string): Promise<Won>
  close(): Promise<void>
}

export interface ElectionAdapter {
  readonly name: string
  /** The store, as bench/adapter.ts names it: rows of one store are compared with each other. */
  readonly store: string
  readonly kind: 'fencelock' | 'peer' | 'floor'
  /** Whether a leadership carries a term (a fence). */
  readonly fences: boolean
  readonly note?: string
  /** A candidate whose lease (or session) is `ttlMs` long. */
  candidate(env: Env, ttlMs: number): Promise<Candidate>
}

/** fencelock on the URL its kit's store gave for the bench variant `name` (the runner starts the stores). */
const fencelock = (name: string, store: string): ElectionAdapter => ({
  name,
  store,
  kind: 'fencelock',
  fences: true,
  async candidate(env, ttlMs) {
    const url = env.urls[name]
    if (url === undefined) throw new Error(`no store was started for ${name}`)
    const client = createLockClient(url, { ttl: ttlMs })
    return {
      campaign: (election) => client.election(election).campaign({ value: `bench ${process.pid}` }),
      close: () => client.close(),
    }
  },
})

/**
 * fencelock on every store whose kit elects and is benched: its first bench variant (the default URL). Memory
 * is left out: its candidates share one process, which the bench kills.
 */
const FENCELOCK: ElectionAdapter[] = KITS.filter(
  (k) => k.primitives.includes('election') && k.bench?.length && k.id !== 'memory',
).map((k) => fencelock(k.bench![0]!.name, k.bench![0]!.store))

/** etcd's Go recipe as etcd3 ports it: a lease of whole seconds, a key per candidate, the lowest revision leads. */
const etcd3Election: ElectionAdapter = {
  name: 'etcd3 Election',
  store: 'etcd',
  kind: 'peer',
  fences: false,
  note: 'lease ttl in whole seconds (the ttl rounded up); the leader key’s revision could serve as a term, the API does not give it',
  async candidate(env, ttlMs) {
    const client = new Etcd3({ hosts: `http://${env.etcd}` })
    return {
      async campaign(election) {
        const campaign = client.election(election, Math.ceil(ttlMs / 1000)).campaign(`bench ${process.pid}`)
        await campaign.wait()
        return { resign: () => campaign.resign() }
      },
      close: async () => client.close(),
    }
  },
}

const LATCH_ROOT = '/bench-latch'

/**
 * Curator's `LeaderLatch` by hand: an EPHEMERAL_SEQUENTIAL `latch-` node under the election's node, the
 * lowest sequence leads, every other watches its predecessor and lists again when that one goes (or at once
 * when it is already gone). A killed leader's node goes when the server expires its session: the session
 * timeout is the ttl. No term, no lost-session handling: the floor a latch reaches.
 */
const zookeeperLatch: ElectionAdapter = {
  name: 'raw floor: zookeeper latch recipe (Curator LeaderLatch)',
  store: 'zookeeper',
  kind: 'floor',
  fences: false,
  note: 'one session per candidate, session timeout = the ttl; ephemeral sequential latch- nodes, watch the predecessor, lowest leads; no term',
  async candidate(env, ttlMs) {
    if (env.zookeeper === '') throw new Error('no zookeeper store was started')
    const client = zookeeper.createClient(env.zookeeper, { sessionTimeout: ttlMs, retries: 0 })
    await new Promise<void>((resolve) => {
      client.once('connected', resolve)
      client.connect()
    })
    return {
      async campaign(election) {
        const dir = `${LATCH_ROOT}/${election}`
        await call<string>((done) => client.mkdirp(dir, done))
        const path = await call<string>((done) =>
          client.create(`${dir}/latch-`, zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL, done),
        )
        const ours = path.slice(dir.length + 1)
        // The bench's own loop: list, lead when first, else wait for the predecessor to go and list again.
        for (;;) {
          const children = await call<string[]>((done) => client.getChildren(dir, done))
          children.sort((a, b) => (sequence(a) < sequence(b) ? -1 : sequence(a) > sequence(b) ? 1 : 0))
          const at = children.indexOf(ours)
          if (at < 0) throw new Error(`${path} is gone (session expired?)`)
          if (at === 0) {
            return {
              resign: () => call<void>((done) => client.remove(path, (error) => done(error, undefined))),
            }
          }
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
          if (stat) await changed
        }
      },
      close: async () => client.close(),
    }
  },
}

/** Every candidate adapter, fencelock first. */
export const ELECTION_ADAPTERS: ElectionAdapter[] = [...FENCELOCK, etcd3Election, zookeeperLatch]
