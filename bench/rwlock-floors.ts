/**
 * The read-write lock bench's hand-written floors on file and ZooKeeper (memory and Redis are in
 * rwlocks.ts): the least work each store allows for a lock that lets many readers or one writer in, written
 * directly with what the project already uses. Each keeps the read-write rule (the bench checks every
 * grant) but has no fence, no lease renewal and no lost-reply recovery, and keeps its state apart from
 * fencelock's (its own folder or root).
 */
import { mkdirSync, watch } from 'node:fs'
import { access, open, readdir, unlink } from 'node:fs/promises'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import zookeeper from 'node-zookeeper-client'
import type { RwLockAdapter } from './rwlocks.js'
import { armed } from './wake.js'
import { call, connected, isNoNode } from './zookeeper.js'

let holderIds = 0
/** A holder id unique across the bench's contenders (one process). */
const holderId = () => `${process.pid}-${holderIds++}`

/** How often a file waiter looks again when no change of the folder was notified. */
const FILE_RETRY_MS = 100

/** Resolves once `ready` answers true, trying again at each change in `folder` (inotify) and every 100 ms. */
async function whenReady(folder: string, ready: () => Promise<boolean>): Promise<void> {
  // Watching before the first try: a change between a try and the wait is not missed.
  let { woken, wake } = armed()
  const watcher = watch(folder, () => wake())
  try {
    while (!(await ready())) {
      await Promise.race([woken, sleep(FILE_RETRY_MS)])
      ;({ woken, wake } = armed())
    }
  } finally {
    watcher.close()
  }
}

/** Creates `path` only when it does not exist (`O_CREAT|O_EXCL`, atomic on a local file system). */
async function createOnce(path: string): Promise<boolean> {
  try {
    await (await open(path, 'wx')).close()
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw error
  }
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  )

/**
 * File, on one host. Node has no `flock(2)`; this stands in for `LOCK_SH`/`LOCK_EX` with the calls it has:
 * a folder per lock, a `write` file taken by an exclusive create, and a `read-<holder>` file per reader.
 * A reader creates its file, then looks for `write`: absent, it reads; present, it removes its file and
 * waits for `write` to go. A writer takes `write`, then waits until no reader file is left (new readers
 * back off while it waits, so readers cannot starve it). The two steps are in opposite orders on each side,
 * so whichever looks second sees the other's file: never a writer beside a reader. No expiry: a dead
 * holder's file stays (flock's would go with the process).
 */
const fileFloor: RwLockAdapter = {
  name: 'raw floor: file, exclusive-create files (flock stand-in)',
  store: 'file',
  kind: 'floor',
  note: 'a `write` file by O_EXCL and a file per reader; a reader backs off when `write` exists, a writer waits for the reader files to go; waiters watch the folder (and look every 100 ms); no expiry',
  async contender(env) {
    const made = new Set<string>()
    return {
      async acquire(name, mode) {
        const folder = join(env.dir, 'rwlock-floor', name)
        if (!made.has(folder)) mkdirSync(folder, { recursive: true })
        made.add(folder)
        const writePath = join(folder, 'write')
        if (mode === 'write') {
          await whenReady(folder, () => createOnce(writePath))
          await whenReady(folder, async () => !(await readdir(folder)).some((f) => f.startsWith('read-')))
          return { release: () => unlink(writePath) }
        }
        const readPath = join(folder, `read-${holderId()}`)
        for (;;) {
          await createOnce(readPath)
          if (!(await exists(writePath))) return { release: () => unlink(readPath) }
          await unlink(readPath)
          await whenReady(folder, async () => !(await exists(writePath)))
        }
      },
      close: async () => {},
    }
  },
}

/** The sequence ZooKeeper appended to a node's name: its last 10 digits. */
const sequenceOf = (node: string) => node.slice(-10)
const WRITER = '__WRIT__'

/**
 * ZooKeeper: Curator's `InterProcessReadWriteLock` recipe. Each acquire creates an EPHEMERAL_SEQUENTIAL
 * node `<holder>-__READ__<seq>` or `<holder>-__WRIT__<seq>` under the lock's node, on a session of the
 * bench's lease, and lists the children in the same round trip (pipelined: a session's requests are
 * answered in order). A writer holds when its node is first by sequence, else it watches the node just
 * ahead; a reader holds when no writer node is ahead of it, else it watches the first writer ahead. When
 * the watched node goes, it lists again. So the line is fair, as fencelock's. A release deletes the node.
 */
const zookeeperFloor: RwLockAdapter = {
  name: 'raw floor: zookeeper Curator-style (__READ__/__WRIT__ sequential nodes)',
  store: 'zookeeper',
  kind: 'floor',
  note: 'one session per contender; create EPHEMERAL_SEQUENTIAL + getChildren pipelined; a writer watches its predecessor, a reader the first writer ahead; delete to release',
  async contender(env, ttlMs) {
    const client = await connected(env, ttlMs)
    const made = new Set<string>()
    const list = (dir: string) => call<string[]>((done) => client.getChildren(dir, done))
    /** The node that keeps `node` out (undefined: it holds), from the children in sequence order. */
    const blocker = (sorted: string[], node: string, mode: 'read' | 'write') => {
      const at = sorted.indexOf(node)
      if (at < 0) throw new Error(`${node} is gone (session expired?)`)
      if (mode === 'write') return at === 0 ? undefined : sorted[at - 1]
      return sorted.slice(0, at).find((n) => n.includes(WRITER))
    }
    return {
      async acquire(name, mode) {
        const dir = `/bench-rw-floor/${name}`
        if (!made.has(dir)) await call<string>((done) => client.mkdirp(dir, done))
        made.add(dir)
        const kind = mode === 'write' ? WRITER : '__READ__'
        const created = call<string>((done) =>
          client.create(`${dir}/${holderId()}-${kind}`, zookeeper.CreateMode.EPHEMERAL_SEQUENTIAL, done),
        )
        let listed: Promise<string[]> | undefined = list(dir)
        listed.catch(() => {})
        const path = await created
        const node = path.slice(dir.length + 1)
        for (;;) {
          const sorted = (await (listed ?? list(dir))).sort((a, b) =>
            sequenceOf(a).localeCompare(sequenceOf(b)),
          )
          listed = undefined
          const ahead = blocker(sorted, node, mode)
          if (ahead === undefined) break
          const { woken, wake } = armed()
          const stat = await call<unknown>((done) =>
            client.exists(`${dir}/${ahead}`, () => wake(), done),
          ).catch((error: unknown) => {
            if (isNoNode(error)) return null
            throw error
          })
          // exists answers null for a node already gone: list again at once.
          if (stat) await woken
        }
        return { release: () => call<void>((done) => client.remove(path, (error) => done(error, undefined))) }
      },
      close: async () => client.close(),
    }
  },
}

/** The floors of this file, by store. */
export const RWLOCK_FLOORS: RwLockAdapter[] = [fileFloor, zookeeperFloor]
