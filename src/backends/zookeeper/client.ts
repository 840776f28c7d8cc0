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
  | 'exists'
  | 'remove'
  | 'mkdirp'
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

/** One request: resolves with its reply, rejects with its error, except `missing` codes, which give `fallback`. */
function request<T, F = never>(
  send: (done: Callback<T>) => void,
  missing?: number,
  fallback?: F,
): Promise<T | F> {
  return new Promise((resolve, reject) => {
    send((error, value) => {
      if (!error) resolve(value)
      else if (missing !== undefined && codeOf(error) === missing) resolve(fallback as F)
      else reject(error)
    })
  })
}

/** Creates `path` with `data` in `mode`; resolves with the path created (a sequential node's, with its number). */
export const create = (client: ZkClient, path: string, data: Buffer, mode: number): Promise<string> =>
  request((done) => client.create(path, data, mode, done))

/** The children's names of `path`, or undefined when `path` does not exist. */
export const children = (client: ZkClient, path: string): Promise<string[] | undefined> =>
  request<string[], undefined>((done) => client.getChildren(path, done), CODE.NO_NODE, undefined)

/** The Stat of `path`, or undefined when it does not exist; `watch` is told of its next change (or creation). */
export const stat = (client: ZkClient, path: string, watch?: Watcher): Promise<Stat | undefined> =>
  request<Stat | null, undefined>(
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
  new Promise((resolve, reject) => {
    const done = (error: unknown, data: Buffer, s: Stat) => {
      if (!error) resolve({ data: data ?? Buffer.alloc(0), stat: s })
      else if (codeOf(error) === CODE.NO_NODE) resolve(undefined)
      else reject(error)
    }
    if (watch) client.getData(path, watch, done)
    else client.getData(path, done)
  })

/** Deletes `path` (any version); false when it was gone already. */
export const remove = (client: ZkClient, path: string): Promise<boolean> =>
  request<boolean, boolean>(
    (done) => client.remove(path, -1, (error) => done(error, true)),
    CODE.NO_NODE,
    false,
  )

/** Creates `path` and its missing parents as persistent nodes (no data). */
export const mkdirp = (client: ZkClient, path: string): Promise<string> =>
  request((done) => client.mkdirp(path, PERSISTENT, done))

/** Clients `closeClient` has closed (closing twice would send a second close request). */
const closed = new WeakSet<object>()

/**
 * Closes `client` safely. node-zookeeper-client 1.1.3 must not be closed before its handshake completes:
 * the server's connect reply is then parsed as an ordinary reply and throws from its socket handler (an
 * uncaught exception that ends the process). Connected, it is closed at once (the server ends the session
 * and deletes its ephemeral nodes); otherwise it stops trying other servers (the one private field we
 * touch, feature-checked) and is closed if a handshake under way completes. A session left that way (one
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
  const manager = (
    client as { connectionManager?: { findNextServer?: unknown; socket?: { destroy(): void } } }
  ).connectionManager
  if (manager && typeof manager.findNextServer === 'function') {
    manager.findNextServer = () => {}
    manager.socket?.destroy()
  }
}
