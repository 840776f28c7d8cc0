/**
 * node-zookeeper-client's callbacks as promises, in one place: every request the backend sends goes
 * through these. Also the protocol's constants (the module itself is an optional peer dependency, loaded
 * only by `fromUrl`; these numbers are ZooKeeper's wire protocol and never change).
 */
import type { Client, Stat } from 'node-zookeeper-client'

/** The parts of a node-zookeeper-client `Client` that fencelock uses. */
export type ZkClient = Pick<
  Client,
  | 'create'
  | 'getChildren'
  | 'getData'
  | 'setData'
  | 'exists'
  | 'remove'
  | 'mkdirp'
  | 'transaction'
  | 'getState'
  | 'getSessionId'
  | 'getSessionPassword'
  | 'getSessionTimeout'
  | 'on'
  | 'once'
  | 'removeListener'
  | 'close'
>

/** ZooKeeper's error codes (KeeperException.Code) that we act on. */
export const CODE = {
  CONNECTION_LOSS: -4,
  NO_NODE: -101,
  BAD_VERSION: -103,
  NODE_EXISTS: -110,
  NOT_EMPTY: -111,
  SESSION_EXPIRED: -112,
} as const

/** CreateMode: a persistent node (parents), an ephemeral sequential one (our queue entries). */
export const PERSISTENT = 0
export const EPHEMERAL_SEQUENTIAL = 3

/** Watcher event types (Watcher.Event.EventType). */
export const NODE_DELETED = 2

/** The ZooKeeper error code of `error`, if it is one. */
export function codeOf(error: unknown): number | undefined {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'number' ? code : undefined
}

/** A zxid (a Stat's czxid, mzxid …): node-zookeeper-client hands over its 8 bytes; it is a signed 64-bit long. */
export const zxidOf = (bytes: Buffer): bigint => bytes.readBigInt64BE(0)

/** A watcher function: called at most once, with the event (ZooKeeper watches are one-shot). */
export type Watcher = (event: { readonly type: number }) => void

type Callback<T> = (error: unknown, value: T) => void

/** A ZooKeeper "session expired" error (the code the server would have answered with). */
const expiredError = () =>
  Object.assign(new Error('the ZooKeeper session expired'), { code: CODE.SESSION_EXPIRED })

/** Per client: rejects once its session has expired. */
const expiries = new WeakMap<ZkClient, Promise<never>>()

/**
 * Rejects once `client`'s session has expired. node-zookeeper-client never answers a request queued while
 * it was disconnected if the reconnection finds the session expired (it drops its queue of unsent
 * requests): without this, such a request (a waiter's check, after a network cut) would be waited on
 * until the caller's deadline.
 */
function expiryOf(client: ZkClient): Promise<never> {
  let expiry = expiries.get(client)
  if (!expiry) {
    expiry = new Promise<never>((_, reject) => {
      if (client.getState().name === 'EXPIRED') reject(expiredError())
      else client.once('expired', () => reject(expiredError()))
    })
    expiry.catch(() => {})
    expiries.set(client, expiry)
  }
  return expiry
}

/**
 * One request on `client`: resolves with its reply, rejects with its error (or once the session has
 * expired), except `missing` codes, which give `fallback`.
 */
function request<T, F = never>(
  client: ZkClient,
  send: (done: Callback<T>) => void,
  missing?: number,
  fallback?: F,
): Promise<T | F> {
  const answered = new Promise<T | F>((resolve, reject) => {
    send((error, value) => {
      if (!error) resolve(value)
      else if (missing !== undefined && codeOf(error) === missing) resolve(fallback as F)
      else reject(error)
    })
  })
  return Promise.race([answered, expiryOf(client)])
}

/** Creates `path` with `data` in `mode`; resolves with the path created (a sequential node's, with its number). */
export const create = (client: ZkClient, path: string, data: Buffer, mode: number): Promise<string> =>
  request(client, (done) => client.create(path, data, mode, done))

/**
 * The children's names of `path`, or undefined when `path` does not exist; `watch` is told of the next
 * change of its children (or of its deletion); none is set when it does not exist.
 */
export const children = (client: ZkClient, path: string, watch?: Watcher): Promise<string[] | undefined> =>
  request<string[], undefined>(
    client,
    (done) => (watch ? client.getChildren(path, watch, done) : client.getChildren(path, done)),
    CODE.NO_NODE,
    undefined,
  )

/** The Stat of `path`, or undefined when it does not exist; `watch` is told of its next change (or creation). */
export const stat = (client: ZkClient, path: string, watch?: Watcher): Promise<Stat | undefined> =>
  request<Stat | null, undefined>(
    client,
    (done) => (watch ? client.exists(path, watch, done) : client.exists(path, done)),
    CODE.NO_NODE,
    undefined,
  ).then((s) => s ?? undefined)

/** The data and Stat of `path`, or undefined when it does not exist (then no watch is left behind). */
export const read = (
  client: ZkClient,
  path: string,
  watch?: Watcher,
): Promise<{ data: Buffer; stat: Stat } | undefined> =>
  request<{ data: Buffer; stat: Stat }, undefined>(
    client,
    (done) => {
      const got = (error: unknown, data: Buffer, s: Stat) =>
        done(error, { data: data ?? Buffer.alloc(0), stat: s })
      if (watch) client.getData(path, watch, got)
      else client.getData(path, got)
    },
    CODE.NO_NODE,
    undefined,
  )

/**
 * Replaces the data of `path` only at data version `version`; false when it was gone. A newer version
 * (someone else wrote it since) is the server's BAD_VERSION error.
 */
export async function setDataAt(
  client: ZkClient,
  path: string,
  data: Buffer,
  version: number,
): Promise<boolean> {
  try {
    return await request<boolean>(client, (done) =>
      client.setData(path, data, version, (error) => done(error, true)),
    )
  } catch (error) {
    if (codeOf(error) === CODE.NO_NODE) return false
    throw error
  }
}

/**
 * Replaces the data of `path` only while `guard` exists, in one multi (a `check` of `guard` at any version,
 * then the `setData`); false when `guard` was gone.
 */
export async function setDataWhile(
  client: ZkClient,
  guard: string,
  path: string,
  data: Buffer,
): Promise<boolean> {
  try {
    return await request<boolean>(client, (done) =>
      client
        .transaction()
        .check(guard, -1)
        .setData(path, data, -1)
        .commit((error) => done(error, true)),
    )
  } catch (error) {
    if (codeOf(error) === CODE.NO_NODE) return false
    throw error
  }
}

/**
 * Creates every node of `nodes` in ONE multi, each with its data in `mode`: all or none. Resolves with the
 * paths created (a sequential node's, with its number), in order.
 */
export const createAll = (
  client: ZkClient,
  nodes: readonly { readonly path: string; readonly data: Buffer }[],
  mode: number,
): Promise<string[]> =>
  request<string[]>(client, (done) => {
    const multi = client.transaction()
    for (const { path, data } of nodes) multi.create(path, data, mode)
    multi.commit((error, results) =>
      done(
        error,
        ((results ?? []) as { path?: string }[]).map((result) => result.path ?? ''),
      ),
    )
  })

/**
 * Deletes every node of `paths` (any version) in ONE multi; where one is gone already (the multi refused
 * whole), each of the others one by one.
 */
export async function removeAll(client: ZkClient, paths: readonly string[]): Promise<void> {
  try {
    await request<unknown>(client, (done) => {
      const multi = client.transaction()
      for (const path of paths) multi.remove(path, -1)
      multi.commit(done)
    })
  } catch (error) {
    if (codeOf(error) !== CODE.NO_NODE) throw error
    await Promise.all(paths.map((path) => remove(client, path)))
  }
}

/** Deletes `path` (any version); false when it was gone already. */
export const remove = (client: ZkClient, path: string): Promise<boolean> =>
  request<boolean, boolean>(
    client,
    (done) => client.remove(path, -1, (error) => done(error, true)),
    CODE.NO_NODE,
    false,
  )

/** Deletes `path` only at data version `version`; false when it was gone, or changed since. */
export async function removeAt(client: ZkClient, path: string, version: number): Promise<boolean> {
  try {
    return await request<boolean>(client, (done) =>
      client.remove(path, version, (error) => done(error, true)),
    )
  } catch (error) {
    if (codeOf(error) === CODE.NO_NODE || codeOf(error) === CODE.BAD_VERSION) return false
    throw error
  }
}

/**
 * A write that changes nothing: a multi of one `check` of `/` (any version). The leader orders it and a
 * quorum commits it, so its answer proves the leader took part (evidence.ts); a read would not (a follower
 * answers those alone).
 */
export const touchLeader = (client: ZkClient): Promise<unknown> =>
  request(client, (done) => client.transaction().check('/').commit(done))

/** Creates `path` and its missing parents as persistent nodes (no data). */
export const mkdirp = (client: ZkClient, path: string): Promise<string> =>
  request(client, (done) => client.mkdirp(path, PERSISTENT, done))

/** The private parts of node-zookeeper-client 1.1.3's ConnectionManager that `closeClient` touches. */
interface Manager {
  findNextServer?: unknown
  socket?: { destroy(): void }
  connectTimeoutHandler?: NodeJS.Timeout
}

/** Clients `closeClient` has closed (closing twice would send a second close request). */
const closed = new WeakSet<object>()

/**
 * Closes `client` safely. node-zookeeper-client 1.1.3 must not be closed before its handshake completes:
 * the server's connect reply is then parsed as an ordinary reply and throws from its socket handler (an
 * uncaught exception that ends the process). Connected, it is closed at once (the server ends the session
 * and deletes its ephemeral nodes); otherwise it stops trying other servers (the one private field we
 * touch, feature-checked, with its connect timer) and is closed if a handshake under way completes. A session left that way (one
 * disconnected by a crash) ends on the server after its timeout, with its nodes.
 */
export function closeClient(client: ZkClient): void {
  if (closed.has(client)) return
  closed.add(client)
  const state = client.getState().name
  if (state === 'SYNC_CONNECTED' || state === 'CONNECTED_READ_ONLY') {
    client.close()
    return
  }
  // Expired or refused: the client has stopped on its own.
  if (state === 'EXPIRED' || state === 'AUTH_FAILED') return
  client.once('connected', () => client.close())
  const manager = (client as { connectionManager?: Manager }).connectionManager
  if (manager && typeof manager.findNextServer === 'function') {
    manager.findNextServer = () => {}
    manager.socket?.destroy()
    // Its connect timer (a session timeout over the number of servers) is cleared only by a socket error
    // or a handshake: left alone, it would keep the process alive that long.
    clearTimeout(manager.connectTimeoutHandler)
  }
}
