/**
 * file:///dir — the embedded default: locks shared by every process on ONE host through a directory.
 * The design (layout, expiry, the fence argument with epochs and per-boot reservations, the race with a
 * removal, durability, the hot path, limits) is told for users in docs/backends/file.md; this header keeps
 * the facts the code leans on.
 *
 * Layout: <dir>/<readable-prefix>~<sha256(key), 32 hex>/ holds generation files (20-digit names, the
 * highest is the state) and `.tmp-<process id>-<n>` records being written; <dir>/.epoch/ is the root's
 * epoch counter and <dir>/.boot/ the epochs reserved per boot (epochs.ts). A record is
 * `{ v: 1, key, state: 'held' | 'free', owner, fence, base, boot, deadline }`; every transition writes a
 * temp file and link()s it as generation N+1: EEXIST means another contender won (a compare-and-swap).
 * Expiry: `deadline` on CLOCK_MONOTONIC, tagged with the boot id; a grant ends early once all of its
 * `holderPids` are certainly gone (holders.ts); an unreadable record counts as held for `unreadableHoldMs`.
 * Fence: `base + generation`; a folder without a generation starts from a new epoch E (base E·2^21), taken
 * only after its temp file pins the folder; a record from another boot never passes its base on.
 * Storage: a folder per lock in use or recently released, not per name ever used: retire.ts removes
 * this process's released folders, sweep.ts those nobody will release; removing one never lowers a fence
 * (the next grant starts from a new epoch, after the removal: the argument is in retire.ts and the docs).
 * Waiting: fs.watch on the key's folder (watch.ts), the core's poll as the fallback.
 * Limits: one host (not NFS); keys up to 64 KiB, ttls up to 2^43 ms (FILE_LIMITS); epochs below 2^42.
 *
 * The other files:
 *   generations.ts   the generation store: read the state, create N+1 exclusively (Pending), collect
 *   records.ts       the record: its shape, reading and making one, `isLive`, `holderGone`
 *   holders.ts       the processes a lease lives with: marking them (pid, start time), and whether all are gone
 *   epochs.ts        the root's epoch counter and the base of a new generation
 *   folders.ts       the folders made in the root: shared (1777) in a root several users share
 *   root.ts          one lock root as this process sees it (settings, boot id, unreadable records, the
 *                    states this process wrote, what each waiter has seen)
 *   host-clock.ts    the host's monotonic clock and boot id
 *   errors.ts        a failed file operation as the error to report (a setting, or an outage)
 *   watch.ts         waitForChange: fs.watch on the key's folder
 *   diagnostics.ts   inspect and doctor
 *   retire.ts        removing the key folders this process released and stopped using
 *   sweep.ts         removing the key folders nobody will release (a crashed holder's, a broken lock's),
 *                    a few at a time after grants and releases; `prune`
 */
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type {
  AcquireRequest,
  AttemptResult,
  BackendLimits,
  BreakOptions,
  BreakResult,
  ExtendResult,
  HeldLease,
  LockBackend,
} from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { retryRounds } from '../../core/retry.js'
import { type ParamSchema, readParams } from '../../core/url.js'
import { fileDoctor, inspectKey, listHeld } from './diagnostics.js'
import { type Durability, nextBase, seenEpochs, startsOf } from './epochs.js'
import { guarded } from './errors.js'
import { createFolder, isSharedRoot, rootMade } from './folders.js'
import {
  type Current,
  collect,
  createGeneration,
  Flush,
  Pending,
  readCurrent,
  type Stamp,
} from './generations.js'
import { markProcesses } from './holders.js'
import { bootId, hasKernelBootId, monotonicMs, sameBoot } from './host-clock.js'
import {
  baseOf,
  freeRecord,
  holderCheckable,
  holderGone,
  isLive,
  newRecord,
  type RecordV1,
} from './records.js'
import { DEFAULT_RETIRE_AFTER_MS, FolderRetirer } from './retire.js'
import {
  folderOf,
  grantFlush,
  type Root,
  SEEN_BY_LIMIT,
  UnreadableRecords,
  WRITTEN,
  type Written,
  writtenId,
} from './root.js'
import {
  DEFAULT_SWEEP_AFTER_MS,
  DEFAULT_SWEEP_EVERY_MS,
  type PruneResult,
  prune,
  RootSweeper,
  testSweepMs,
} from './sweep.js'
import { folderChanged } from './watch.js'

/** What `fileBackend` is told. */
export interface FileBackendOptions {
  /** The folder holding the locks; created if missing. Every process that shares locks must use the same one. */
  readonly dir: string
  /**
   * Flush to disk what a power loss must not lose, so that it cannot hand out the same fence twice (or a
   * lower one). Where the kernel gives a boot id (Linux), that is paid once per boot: one fsync when the
   * first fence epoch of a boot is reserved (and about once a minute while new epochs are being taken),
   * none per acquire. Elsewhere each acquiring record, its folder and each new epoch are fsynced before
   * the grant. Extends and releases never need it: after a crash the boot id changes and every lease has
   * ended anyway.
   * @default true
   */
  readonly fsync?: boolean | undefined
  /**
   * How long an unreadable record must be seen unchanged before it counts as expired.
   * @default 60000
   */
  readonly unreadableHoldMs?: number | undefined
  /**
   * The processes of this host each lease granted here lives with: once every one of them has exited (it
   * is checked by pid and start time, so a reused pid is told apart), the lease is over at once instead of
   * at the end of its ttl. `[]` leaves it to the ttl alone (for a lease meant to outlast this process).
   * Where the processes cannot be told apart for certain (no /proc, another pid namespace sharing the
   * folder), the ttl alone ends it anyway.
   * @default [process.pid]
   */
  readonly holderPids?: readonly number[] | undefined
}

/** The file backend: it breaks a lease by writing a free record; its holder finds out on its next renewal. */
export interface FileBackend extends LockBackend {
  breakLock(key: string, options?: BreakOptions): Promise<BreakResult>
  /**
   * Removes now every key folder under `prefix` (of the key) whose lease has ended, whatever its age: what
   * a live client's background sweep does a minute after the end. Live leases stay; fences never go back.
   */
  prune(prefix?: string): Promise<PruneResult>
}

/**
 * What the file backend can represent. Keys: any length works for the folder name (it is a hash), but the
 * record stores the key and every attempt reads the record: 64 KiB keeps that a few pages. Ttl: the
 * record's deadline is the monotonic clock (ms since boot, below 2^43 for 278 years of uptime) plus the
 * ttl; with ttl ≤ 2^43 the sum stays below 2^44, where a double holds every integer ms exactly (with
 * 4 µs to spare) and JSON gives it back bit for bit.
 */
export const FILE_LIMITS: BackendLimits = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 }

/**
 * How soon a waiter refused by a lease whose processes can be checked tries again: a holder's death
 * writes nothing that a watch could see. Each try is a listing and two small reads (the record, and
 * /proc/<pid>/stat): a few tens of microseconds.
 */
const HOLDER_CHECK_MS = 100

/** How many rounds `breakLock` makes; each round loses only to another writer's transition. */
const BREAK_ROUNDS = 100

/**
 * For tests only (not exported from the package): a boot to pretend to be in, and the flush counter to
 * read. `bootId` replaces the host's boot id for this backend alone ('uptime:…' plays a host with none).
 * @internal
 */
export interface FileTestHooks {
  readonly bootId?: string | undefined
  /** Counts every fsync this backend makes (it is the one the backend flushes with). */
  readonly flush?: Flush | undefined
  /** The wall clock in ms that new epochs start at (epochs.ts). */
  readonly clock?: (() => number) | undefined
  /** How a bump waits for `clock` to pass its epoch (epochs.ts): a test's own clock advances here. */
  readonly sleep?: ((ms: number) => Promise<void>) | undefined
  /** How long a released key folder stays before its removal (retire.ts); Infinity keeps every one. */
  readonly retireAfterMs?: number | undefined
  /** How long after its lease ended a folder may be swept (sweep.ts); Infinity sweeps none. */
  readonly sweepAfterMs?: number | undefined
  /** How often the backend sweeps at most (sweep.ts). */
  readonly sweepEveryMs?: number | undefined
}

/**
 * Creates the file backend.
 * @example
 * const locks = createLockClient(fileBackend({ dir: '/var/lock/myapp' }))
 */
export function fileBackend(options: FileBackendOptions, hooks?: FileTestHooks): FileBackend {
  if (typeof options?.dir !== 'string' || options.dir === '') {
    throw new TypeError('Expected `dir` to be a folder path for the file backend, e.g. /var/lock/myapp')
  }
  const dir = resolve(options.dir)
  const boot = hooks?.bootId ?? bootId()
  // Per boot where a boot id tells boots apart for certain; per acquire where it cannot (see epochs.ts).
  const durability: Durability =
    (options.fsync ?? true) ? (hasKernelBootId(boot) ? 'boot' : 'acquire') : 'none'
  const root: Root = {
    dir,
    id: `file://${dir}`,
    durability,
    flush: hooks?.flush ?? new Flush(),
    shared: isSharedRoot(dir),
    clock: hooks?.clock,
    sleep: hooks?.sleep,
    boot,
    unreadable: new UnreadableRecords(options.unreadableHoldMs ?? 60_000),
    processes: markProcesses(holderPidsOf(options)),
    written: WRITTEN,
    seenBy: new BoundedMap(SEEN_BY_LIMIT),
    seen: seenEpochs(dir),
    starts: startsOf(dir, boot, durability),
  }
  const retirer = new FolderRetirer(hooks?.retireAfterMs ?? DEFAULT_RETIRE_AFTER_MS)
  const sweeper = sweeperOf(root, hooks)
  return {
    id: root.id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },
    limits: FILE_LIMITS,
    tryAcquire: (req, signal) =>
      guarded(root, req.key, 'acquire', () => acquireOnce(root, req, signal, sweeper)),
    extend: (lease, ttlMs) => guarded(root, lease.key, 'extend', () => extendLease(root, lease, ttlMs)),
    release: (lease) =>
      guarded(root, lease.key, 'release', () => releaseLease(root, lease, retirer, sweeper)),
    abandon: (req) => guarded(root, req.key, 'abandon', () => abandonAttempt(root, req)),
    inspect: (key) => guarded(root, key, 'inspect', () => inspectKey(root, key)),
    waitForChange: ({ key, owner }, signal) =>
      folderChanged(folderOf(root, key), signal, () => root.seenBy.get(owner)),
    list: (prefix) => listHeld(root, prefix),
    breakLock: (key, options) =>
      guarded(root, key, 'break the lock', () => breakLock(root, key, options?.fence)),
    prune: (prefix = '') => guarded(root, prefix, 'prune', () => prune(root, prefix)),
    doctor: () => fileDoctor(root),
    async close() {
      sweeper?.close()
      retirer.close()
    },
  }
}

/** The backend's sweep (sweep.ts), with the tests' settings if any; none when it never sweeps. */
function sweeperOf(root: Root, hooks: FileTestHooks | undefined): RootSweeper | undefined {
  const test = testSweepMs()
  const afterMs = hooks?.sweepAfterMs ?? test ?? DEFAULT_SWEEP_AFTER_MS
  if (afterMs === Number.POSITIVE_INFINITY) return undefined
  return new RootSweeper(root, afterMs, hooks?.sweepEveryMs ?? test ?? DEFAULT_SWEEP_EVERY_MS)
}

/** `holderPids`, checked: pids are positive integers. */
function holderPidsOf(options: FileBackendOptions): readonly number[] {
  const pids = options.holderPids ?? [process.pid]
  if (!Array.isArray(pids) || !pids.every((pid) => Number.isSafeInteger(pid) && pid > 0)) {
    throw new TypeError(
      `Expected \`holderPids\` to be an array of process ids for the file backend, got ${String(pids)}`,
    )
  }
  return pids
}

/** What an attempt found: someone's live lease, our own (a lost reply), or a state we may succeed. */
type Plan =
  | { readonly act: 'answer'; readonly result: AttemptResult }
  /** `base` undefined: start a fresh range (no generation, or an unreadable one). */
  | { readonly act: 'take'; readonly base: bigint | undefined }

/**
 * One attempt: take the key as generation N+1 when its state N is free or expired, answer "ours" when an
 * earlier attempt of this acquire won, or report how long the holder's lease has left. The state is what
 * this process wrote last in the folder, when it still stands (one stat), else what a read of the folder
 * finds. `signal`: the core stopped waiting for this attempt (its bound passed, or the caller aborted).
 */
async function acquireOnce(
  root: Root,
  req: AcquireRequest,
  signal: AbortSignal,
  sweeper: RootSweeper | undefined,
): Promise<AttemptResult> {
  const result = await attempt(root, req, signal)
  // A grant ends the wait; a refusal's reading stays for the wake-up hint (acquireRead notes it).
  if (result.granted) {
    root.seenBy.delete(req.owner)
    // A client that takes locks sweeps the root now and then: what nobody will release goes too.
    sweeper?.used()
  }
  return result
}

async function attempt(root: Root, req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
  const id = writtenId(root, req.key)
  const written = root.written.get(id)
  const folder = written?.folder ?? folderOf(root, req.key)
  // The deadline counts from before we look: never later than the lease the core believes in.
  const start = monotonicMs()
  let pending: Pending | undefined
  try {
    // A live record goes the long way: the folder may hold a successor (a release by another process)
    // that this process never saw, and answering "held" from a stale record would wait for nothing.
    if (written && !isLive(written.record, root.boot)) {
      // Pin the folder, then check that our last write is still its state (name N, that very file): then
      // it is what a read would find, unless a successor N+1 exists, which our link of N+1 finds out.
      pending = pendingIn(folder)
      if (pending?.holds(written.gen, written.stamp)) {
        const next = plan(root, folder, { ...written, names: [] }, req.owner)
        if (next.act === 'take') {
          const granted = await take(root, req, folder, pending, written, next.base, start, signal)
          if (granted) return granted
          pending = undefined // Used up by its commit: the read below starts afresh.
        }
      }
      root.written.forget(id)
    } else {
      // The root is made once per process, off the event loop, however many first acquires start at
      // once (folders.ts): a fresh root's key folders would otherwise each make it, synchronously.
      await rootMade(root.dir)
      // A key this process has not written in: its folder is made if missing (one call either way, and
      // no exception). A folder we have just made holds no generation: pin it, and take generation 1. (A
      // folder that cannot be made is a setting error, thrown as such: errors.ts.)
      if (createFolder(folder, root.shared) !== undefined) {
        pending = pendingIn(folder)
        // Whatever this acquire saw before was another folder: every generation of this one is news.
        root.seenBy.delete(req.owner)
        if (pending) {
          const granted = await take(root, req, folder, pending, undefined, undefined, start, signal)
          if (granted) return granted
          pending = undefined
        }
      }
    }
    return await acquireRead(root, req, folder, pending, start, signal)
  } finally {
    pending?.discard()
  }
}

/**
 * How many reads of the folder one attempt makes at most. A take that lost to another writer reads
 * again, to answer what the folder then holds: a lease and how long it has left (the winner's, or ours
 * when an earlier attempt of this acquire won), or a state it may succeed. A bare refusal would have the
 * core report the key held by another owner when nobody holds it.
 */
const READ_ROUNDS = 3

/** An attempt on the state a read of the folder finds; `pinned`, if any, pinned the folder before it. */
async function acquireRead(
  root: Root,
  req: AcquireRequest,
  folder: string,
  pinned: Pending | undefined,
  start: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  let pending = pinned
  // Bounded rounds, each after a lost race (another writer made progress), with no wait: not a retry.
  for (let round = 0; round < READ_ROUNDS && !signal.aborted; round++) {
    const result = await readAndTake(root, req, folder, pending, start, signal)
    if (result) return result
    pending = undefined // Used up, or never made: the next round pins afresh.
  }
  // Every round lost to a writer that got there first: the key is being taken by others.
  return { granted: false }
}

/**
 * One read of the folder and what follows from it: the answer, or undefined when another writer (or a
 * removal) got in between the read and our link. `pinned` is discarded before it returns.
 */
async function readAndTake(
  root: Root,
  req: AcquireRequest,
  folder: string,
  pinned: Pending | undefined,
  start: number,
  signal: AbortSignal,
): Promise<AttemptResult | undefined> {
  let pending = pinned
  try {
    let current = await readCurrent(folder)
    if (current.record === 'none' && !pending) {
      // No generation: a new key, or its folder or files were removed. (Re)create the folder; a folder
      // that cannot be made is a setting error, thrown as such (errors.ts).
      const made = current.missing && createFolder(folder, root.shared) !== undefined
      // Pin the folder first, then read it again: whatever we decide next is decided on the folder our
      // link will land in, and a new epoch is taken after every removal that preceded this read. A folder
      // we have just made needs no read: it was empty when made, and our pin followed.
      pending = pendingIn(folder)
      if (!pending) return undefined
      if (!made) {
        current = await readCurrent(folder)
        if (current.record === 'none' && current.missing) return undefined
      }
    }
    // What this acquire has seen: its wake-up hint ignores events on generations up to this one.
    root.seenBy.renew(req.owner, current.gen)
    const next = plan(root, folder, current, req.owner)
    if (next.act === 'answer') return next.result
    // The temp file pins the folder; commit() checks that it is the folder we read (see the header).
    pending ??= pendingIn(folder)
    // The folder vanished since our read: the next round recreates it.
    if (!pending) return undefined
    const read = current.record === 'none' ? undefined : current
    const taken = take(root, req, folder, pending, read, next.base, start, signal)
    pending = undefined // take's commit discards it.
    return await taken
  } finally {
    pending?.discard()
  }
}

/**
 * Creates generation N+1 holding the lease, after `state` (N; undefined for none, the folder pinned before
 * the read that found none): the grant, or undefined when another writer got there first. An attempt the
 * core stopped waiting for links nothing: its grant would only be given back (attempt.ts, `releaseLate`),
 * and meanwhile the next attempt of the same acquire would find the key taken.
 */
async function take(
  root: Root,
  { key, owner, ttlMs, holder }: AcquireRequest,
  folder: string,
  pending: Pending,
  state: { readonly gen: bigint; readonly stamp: Stamp } | undefined,
  carried: bigint | undefined,
  start: number,
  signal: AbortSignal,
): Promise<AttemptResult | undefined> {
  try {
    const gen = (state?.gen ?? 0n) + 1n
    const base = await nextBase(root, carried, gen, folder)
    // The core answers nothing more to this attempt once its signal aborted: a refusal it never reads.
    if (signal.aborted) return { granted: false }
    const fence = base + gen
    const deadline = start + ttlMs
    // No flush within a boot (unless the host has no boot id): see epochs.ts and `carriedBase`.
    const { processes } = root
    const record = newRecord(
      { key, state: 'held', owner, fence, base, deadline, holder, processes },
      root.boot,
    )
    const stamp = await pending.write(record, grantFlush(root))
    if (signal.aborted) return { granted: false }
    const names = await pending.commit(gen, grantFlush(root), state?.stamp)
    if (!names) return undefined
    collect(folder, gen, names)
    const cookie: Written = { folder, gen, record, stamp }
    root.written.remember(writtenId(root, key), cookie)
    return { granted: true, fence, ttlMs, cookie }
  } finally {
    pending.discard()
  }
}

function plan(root: Root, folder: string, current: Current, owner: string): Plan {
  if (current.record === 'none') return { act: 'take', base: undefined }
  if (current.record === 'unreadable') {
    const remaining = root.unreadable.remainingMs(folder, current.gen)
    if (remaining > 0) return { act: 'answer', result: { granted: false, retryInMs: remaining } }
    return { act: 'take', base: undefined }
  }
  const r = current.record
  if (!isLive(r, root.boot)) return { act: 'take', base: carriedBase(root, r) }
  if (r.owner === owner) {
    // An earlier attempt of this same acquire won and its reply was lost: it is ours.
    // Its lease is what is left of that attempt's deadline, not a fresh ttl.
    const cookie: Written = { folder, gen: current.gen, record: r, stamp: current.stamp }
    const ttlMs = r.deadline - monotonicMs()
    return { act: 'answer', result: { granted: true, fence: BigInt(r.fence), ttlMs, cookie } }
  }
  // Its processes all gone: nobody can renew or release it, and nothing it guarded runs. Taken over like an
  // expired lease, so the fence rules are the same (the successor's fence is the next one).
  if (holderGone(r, root.boot)) return { act: 'take', base: carriedBase(root, r) }
  const remaining = r.deadline - monotonicMs()
  const retryInMs = holderCheckable(r, root.boot) ? Math.min(remaining, HOLDER_CHECK_MS) : remaining
  return { act: 'answer', result: { granted: false, retryInMs } }
}

/**
 * The base a successor of `record` goes on from: its own when it was written in this boot; none (a new
 * epoch) when it was written in another. Within a boot nothing is fsynced, so a power loss may have taken
 * the old boot's last generations of this folder, and their fences, with it: the disk's newest record can
 * be behind what that boot granted. A new epoch of this boot exceeds them all (epochs.ts). Records of this
 * boot are exactly what every process of it wrote: the page cache is shared and outlives process crashes.
 */
function carriedBase(root: Root, record: RecordV1): bigint | undefined {
  return sameBoot(record.boot, root.boot) || root.durability === 'acquire' ? baseOf(record) : undefined
}

async function extendLease(root: Root, lease: HeldLease, ttlMs: number): Promise<ExtendResult> {
  const start = monotonicMs()
  const { key, owner, fence } = lease
  // The holder's description goes on from the record we extend (it was written by our own grant).
  const cookie = await transition(root, lease, (base, current) =>
    newRecord(
      {
        key,
        state: 'held',
        owner,
        fence,
        base,
        deadline: start + ttlMs,
        holder: current.holder,
        processes: root.processes,
      },
      root.boot,
    ),
  )
  return cookie === undefined ? { renewed: false } : { renewed: true, cookie }
}

async function releaseLease(
  root: Root,
  lease: HeldLease,
  retirer: FolderRetirer,
  sweeper: RootSweeper | undefined,
): Promise<boolean> {
  const cookie = await transition(root, lease, (base) => freeRecord(lease.key, lease.fence, base, root.boot))
  if (cookie === undefined) return false
  // Its folder goes once the key stays unused a while (retire.ts): the root keeps what is in use.
  retirer.released(cookie.folder, cookie.gen, cookie.stamp)
  sweeper?.used()
  return true
}

async function abandonAttempt(root: Root, { key, owner }: AcquireRequest): Promise<void> {
  root.seenBy.delete(owner) // The acquire has ended: its hint is no longer armed.
  // An attempt whose caller gave up may have linked a held generation for us: free it, owner-checked.
  // The transition is a compare-and-swap on the very file we read, so a successor, or a new folder's
  // record of the same generation, is never touched.
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none' || current.record === 'unreadable') return
  if (current.record.state !== 'held' || current.record.owner !== owner) return
  const fence = BigInt(current.record.fence)
  const cookie: Written = { folder, gen: current.gen, record: current.record, stamp: current.stamp }
  await transition(root, { key, owner, fence, cookie }, (base) => freeRecord(key, fence, base, root.boot))
}

/**
 * Moves a lease we hold from its generation to the next one; undefined when it is no longer ours. The
 * cookie names the very file of our record (generation, inode, mtime): while that file is still the name
 * N of the folder, nobody else has written after it (a successor N+1 fails our link), so no listing and
 * no read are needed. Any other file there means the lease expired and someone took over, or it was
 * broken, or its folder was removed (a new folder's record of the same generation is another file), or
 * its files were put back by hand: in every case the lease is no longer ours.
 */
async function transition(
  root: Root,
  lease: HeldLease,
  next: (base: bigint, current: RecordV1) => RecordV1,
): Promise<Written | undefined> {
  const held = lease.cookie as Written
  const { folder } = held
  const id = writtenId(root, lease.key)
  // Owner-checked, as the contract says: a cookie alone releases nothing for another owner.
  if (held.record.owner !== lease.owner) return undefined
  // The temp file pins the folder; `holds` checks, after it, that our record is still in place there.
  const pending = pendingIn(folder)
  try {
    if (!pending?.holds(held.gen, held.stamp)) {
      root.written.forget(id)
      return undefined
    }
    const gen = held.gen + 1n
    // Our own live record: written in this boot, so its base goes on.
    const base = await nextBase(root, baseOf(held.record), gen, folder)
    const record = next(base, held.record)
    const stamp = await pending.write(record, undefined)
    const names = await pending.commit(gen, undefined, held.stamp)
    if (!names) {
      root.written.forget(id)
      return undefined
    }
    collect(folder, gen, names)
    const cookie: Written = { folder, gen, record, stamp }
    root.written.remember(id, cookie)
    return cookie
  } finally {
    pending?.discard()
  }
}

/** A pending record in `folder`, or undefined when the folder is gone (it was removed meanwhile). */
function pendingIn(folder: string): Pending | undefined {
  try {
    return new Pending(folder)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw error
  }
}

/** Writes a free record over whatever `key` holds, in bounded rounds (the core's `retryRounds`). */
async function breakLock(root: Root, key: string, onlyFence: bigint | undefined): Promise<BreakResult> {
  return retryRounds(
    BREAK_ROUNDS,
    () => breakOnce(root, key, onlyFence),
    () => new Error(`the lock kept changing under ${BREAK_ROUNDS} attempts to break it`),
  )
}

/**
 * One round of `breakLock`: what it did, or undefined when another writer's transition got in first. An
 * unreadable record counts as held (as attempts count it) and is broken unless a fence was asked for.
 */
async function breakOnce(
  root: Root,
  key: string,
  onlyFence: bigint | undefined,
): Promise<BreakResult | undefined> {
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none') return { broken: false }
  const known = current.record === 'unreadable' ? undefined : current.record
  if (known && (!isLive(known, root.boot) || holderGone(known, root.boot))) return { broken: false }
  const lease = known && { owner: known.owner ?? '', fence: BigInt(known.fence), holder: known.holder }
  if (onlyFence !== undefined && lease?.fence !== onlyFence) return { broken: false, lease }
  const gen = current.gen + 1n
  const base = await nextBase(root, known ? carriedBase(root, known) : undefined, gen, folder)
  const fence = known ? BigInt(known.fence) : 0n
  const names = await createGeneration(
    folder,
    gen,
    freeRecord(key, fence, base, root.boot),
    undefined,
    current.stamp,
  ).catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'gone' as const
    throw error
  })
  if (names === 'gone') return { broken: false } // The folder went with its last lease: nothing held.
  if (!names) return undefined
  collect(folder, gen, names)
  return { broken: true, lease }
}

/** The URL parameters of file:// (its page in docs/backends/ is tested against this). */
export const PARAMS = {
  fsync: {
    type: 'bool',
    default: true,
    doc: 'flush to disk what a power loss must not lose: once per boot where the host has a boot id, else each grant (false: a power loss may repeat a fence)',
  },
} as const satisfies ParamSchema

/**
 * `file:///abs/dir[?fsync=false]`. Unknown parameters are refused with a "did you mean" (`readParams`).
 * `options` adds what a URL does not carry (the CLI's `holderPids`).
 */
export function fromUrl(url: URL, options: Omit<FileBackendOptions, 'dir' | 'fsync'> = {}): FileBackend {
  if (url.host !== '') {
    throw new TypeError(
      `Expected a local file URL like file:///var/lock/app, got ${url.href} (host "${url.host}")`,
    )
  }
  const { fsync } = readParams(url, PARAMS)
  return fileBackend({ ...options, dir: fileURLToPath(url), fsync })
}
