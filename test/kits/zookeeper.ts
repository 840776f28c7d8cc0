/**
 * The ZooKeeper backend's kits: a standalone server and an ensemble of three. The holder of a lock is the
 * first child of the backend's own `lockPath(key)` in Curator's order (`inLine`): a lease is broken by
 * deleting that child; a session lost by expiring the session that owns it, deterministically: a second
 * client attaches to that session (its id, from the child's ephemeralOwner, and its password, which the
 * server derives from the id: `sessionPassword`) and closes it, so the server expires it and deletes its
 * ephemeral nodes at once.
 */
import zookeeper from 'node-zookeeper-client'
import { CODE, codeOf } from '../../src/backends/zookeeper/client.js'
import { DEFAULT_PREFIX, inLine, lockPath } from '../../src/backends/zookeeper/layout.js'
import { startZooKeeper, type ZooKeeperEnsemble } from '../servers/zookeeper.js'
import { type Kit, type KitStore, loopback } from './kit.js'
import { memberFaults } from './members.js'

type Client = zookeeper.Client

/** A connected admin client (a fresh one: a crash or a restart may have broken an older one). */
export async function connectAdmin(
  connectString: string,
  options: Partial<zookeeper.Option> & { sessionId?: Buffer; sessionPassword?: Buffer } = {},
): Promise<Client> {
  const client = zookeeper.createClient(connectString, { sessionTimeout: 10_000, spinDelay: 100, ...options })
  const connected = new Promise<void>((resolve, reject) => {
    client.once('connected', () => resolve())
    client.once('expired', () => reject(new Error('the admin session expired at once')))
  })
  client.connect()
  try {
    await within(connected, 30_000, `a ZooKeeper admin connection to ${connectString}`)
  } catch (error) {
    client.close()
    throw error
  }
  return client
}

async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)
  })
  return await Promise.race([promise, late]).finally(() => clearTimeout(timer))
}

/** Runs `use` with a fresh admin client, closed after. */
export async function withAdmin<T>(connectString: string, use: (admin: Client) => Promise<T>): Promise<T> {
  const admin = await connectAdmin(connectString)
  try {
    return await use(admin)
  } finally {
    admin.close()
  }
}

/** A callback API call as a promise. */
export const call = <T>(send: (done: (error: unknown, value: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => send((error, value) => (error ? reject(error) : resolve(value))))

/** The holder's child of the lock named `key` (its path and the session owning it), if held. */
export async function holderNode(
  admin: Client,
  key: string,
  prefix?: string,
): Promise<{ path: string; session: Buffer } | undefined> {
  const path = lockPath(key, prefix)
  const names = await call<string[]>((done) => admin.getChildren(path, done)).catch(() => [])
  for (const child of inLine(names)) {
    const stat = await call<zookeeper.Stat | null>((done) => admin.exists(`${path}/${child}`, done))
    if (stat) return { path: `${path}/${child}`, session: stat.ephemeralOwner }
  }
  return undefined
}

/**
 * The password of session `id`, as the server makes it (ZooKeeperServer.generatePasswd: 16 bytes of
 * java.util.Random seeded with the id XOR 0xB3415C00): what lets a test attach to another's session.
 */
export function sessionPassword(id: Buffer): Buffer {
  const MASK = (1n << 48n) - 1n
  let seed = (id.readBigInt64BE(0) ^ 0xb3415c00n ^ 0x5deece66dn) & MASK
  const nextInt = () => {
    seed = (seed * 0x5deece66dn + 0xbn) & MASK
    return Number(BigInt.asIntN(32, seed >> 16n))
  }
  const out = Buffer.alloc(16)
  for (let i = 0; i < out.length; ) {
    let rnd = nextInt()
    for (let n = Math.min(out.length - i, 4); n > 0; n--, rnd >>= 8) out[i++] = rnd & 0xff
  }
  return out
}

/**
 * Expires session `id` now: attach to it with its password, then close it (the server deletes its
 * ephemeral nodes). The session's own client, whose connection the attach closed, reconnects at once and
 * may take the session back before our close arrives (the server then drops our connection and its close):
 * so again, until an attach finds the session expired.
 */
export async function expireSession(connectString: string, id: Buffer): Promise<void> {
  for (let attempt = 0; attempt < 20; attempt++) {
    let twin: Client
    try {
      twin = await connectAdmin(connectString, { sessionId: id, sessionPassword: sessionPassword(id) })
    } catch (error) {
      if (/expired/.test((error as Error).message)) return
      throw error
    }
    const closed = new Promise<void>((resolve) => twin.once('disconnected', () => resolve()))
    twin.close()
    await within(closed, 10_000, 'the closing of the session to expire')
  }
  throw new Error(`ZooKeeper session 0x${id.toString('hex')} did not expire after 20 closes`)
}

/**
 * `deleteall path`, as zkCli does it: the children first (depth first), then the node; a node gone
 * meanwhile (an ephemeral one whose session ended) is fine, and one created meanwhile is left.
 */
export async function deleteAll(admin: Client, path: string): Promise<void> {
  const kids = await call<string[]>((done) => admin.getChildren(path, done)).catch((error: unknown) => {
    if (codeOf(error) === CODE.NO_NODE) return undefined
    throw error
  })
  if (kids === undefined) return
  for (const kid of kids) await deleteAll(admin, `${path === '/' ? '' : path}/${kid}`)
  await call((done) => admin.remove(path, -1, (error) => done(error, undefined))).catch((error: unknown) => {
    if (codeOf(error) !== CODE.NO_NODE && codeOf(error) !== CODE.NOT_EMPTY) throw error
  })
}

function zookeeperStore(ensemble: ZooKeeperEnsemble): KitStore {
  const { members, connectString } = ensemble
  return {
    url: (query = '') => ensemble.url(query),
    ports: members.map((m) => m.clientPort),
    urlVia: (ports, query = '') => `zookeeper://${loopback(ports)}${query}`,
    breakLease: (key) =>
      withAdmin(connectString, async (admin) => {
        const holder = await holderNode(admin, key)
        if (holder) await call((done) => admin.remove(holder.path, -1, (error) => done(error, undefined)))
      }),
    loseSession: async (key) => {
      const holder = await withAdmin(connectString, (admin) => holderNode(admin, key))
      if (!holder) throw new Error(`no holder of ${key} to take the session of`)
      await expireSession(connectString, holder.session)
    },
    // An operator's `deleteall` of the lock's node (its queue), or of the whole prefix.
    deleteState: (key) =>
      withAdmin(connectString, (admin) =>
        deleteAll(admin, key === undefined ? DEFAULT_PREFIX : lockPath(key)),
      ),
    ...memberFaults(members, () => ensemble.leader()),
    ...(members.length > 1
      ? {
          isolateMember: async (node: number) => ensemble.isolate(node % members.length),
          leaderIndex: async () => members.indexOf(await ensemble.leader()),
        }
      : {}),
    logs: () => Object.fromEntries(members.map((m) => [`zookeeper-${m.id}`, m.log()])),
    recoveryMs: 5000,
    close: () => ensemble.destroy(),
  }
}

function zookeeperKit(size: number): Kit {
  return {
    id: size === 1 ? 'zookeeper' : `zookeeper-${size}`,
    backend: 'zookeeper',
    title: size === 1 ? 'zookeeper' : `zookeeper (${size} members)`,
    entry: size === 1 ? 'zookeeper/conformance' : 'zookeeper/conformance-ensemble',
    primitives: ['mutex', 'slots', 'election', 'semaphore', 'multikey', 'multikey-atomic', 'rwlock'],
    networked: true,
    capabilities: {
      fifo: true,
      session: true,
      notify: true,
      // Sessions may be as short as 2 ticks (400 ms here); 1 s leaves room for a busy machine's pauses.
      minTtlMs: 1000,
      // Every member keeps its data folder across a restart: zxids (the fences) continue from there.
      durableFences: true,
      processes: true,
      longerExtend: false,
    },
    lacks: {
      longerExtend:
        "a lock's ephemeral node stays on the session that created it, whose timeout was fixed when it connected",
    },
    // An ensemble's members reach each other through proxies, for `isolateMember`.
    start: async () => zookeeperStore(await startZooKeeper(size, { partitionable: size > 1 })),
  }
}

export const zookeeperKit1: Kit = {
  ...zookeeperKit(1),
  chaos: [{ name: 'zookeeper', features: ['crash', 'durable', 'expire', 'delete-state'] }],
  bench: [{ name: 'fencelock zookeeper', store: 'zookeeper' }],
}

export const zookeeperKit3: Kit = {
  ...zookeeperKit(3),
  chaos: [{ name: 'zookeeper-3', features: ['leader', 'durable', 'expire', 'members', 'delete-state'] }],
}
