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
 * Elections: the same leases with the leader's value, in a root of their own, <dir>/.elections/ (election/).
 * Semaphores: a record per semaphore (limit, leases, line), in a root of their own, <dir>/.semaphores/
 * (semaphore/). Read-write locks: a record per lock (a line of readers and writers), in <dir>/.rwlocks/
 * (rwlock/).
 *
 * The folder: the shell (this file) makes the root and wires each primitive's facet into the backend;
 * each primitive is a folder of its records and operations (mutex/, whose header says how another one is
 * added); the rest is what every primitive shares:
 *   root.ts          one lock root as this process sees it (settings, boot id, unreadable records, what
 *                    each waiter has seen)
 *   inner-root.ts    a primitive's own root inside the lock root (.elections, .semaphores), made once
 *   generations.ts   the generation store: read the state, create N+1 exclusively (Pending), collect
 *   epochs.ts        the root's epoch counter and the base of a new generation
 *   holders.ts       the processes a lease lives with: marking them (pid, start time), and whether all are gone
 *   host-clock.ts    the host's monotonic clock and boot id
 *   folders.ts       the folders made in the root: shared (1777) in a root several users share
 *   errors.ts        a failed file operation as the error to report (a setting, or an outage)
 *   watch.ts         waitForChange: fs.watch on a key's folder
 *   retire.ts        removing the key folders this process released and stopped using
 *   sweep.ts         removing the key folders nobody will release (a crashed holder's, a broken lock's),
 *                    a few at a time after grants and releases; `prune`
 *   diagnostics.ts   doctor
 *   election/        leader election: the mutex's lease with a value, in <dir>/.elections/
 *   semaphore/       counting semaphores: one record per semaphore, in <dir>/.semaphores/
 *   rwlock/          read-write locks: one record per lock, in <dir>/.rwlocks/
 *   whole-record.ts  one change of a semaphore's or read-write lock's record: read, decide, link
 */
import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type {
  BackendLimits,
  BreakOptions,
  BreakResult,
  LockBackend,
  RwLockFacet,
  SemaphoreFacet,
} from '../../core/backend.js'
import { BoundedMap } from '../../core/bounded-map.js'
import { type ParamSchema, readParams } from '../../core/url.js'
import { fileDoctor } from './diagnostics.js'
import { electionRoot, type FileElection, fileElection } from './election/index.js'
import { type Durability, seenEpochs, startsOf } from './epochs.js'
import { guarded } from './errors.js'
import { isSharedRoot } from './folders.js'
import { Flush } from './generations.js'
import { markProcesses } from './holders.js'
import { bootId, hasKernelBootId } from './host-clock.js'
import { fileMutex, LEASE_RECORDS } from './mutex/index.js'
import { DEFAULT_RETIRE_AFTER_MS, FolderRetirer } from './retire.js'
import { type Root, SEEN_BY_LIMIT, UnreadableRecords } from './root.js'
import { fileRwLock, RWLOCK_RECORDS, rwlockRoot } from './rwlock/index.js'
import { fileSemaphore, SEMAPHORE_RECORDS, semaphoreRoot } from './semaphore/index.js'
import {
  DEFAULT_SWEEP_AFTER_MS,
  DEFAULT_SWEEP_EVERY_MS,
  type PruneResult,
  prune,
  RootSweeper,
  type SweptRecords,
  testSweepMs,
} from './sweep.js'

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
  /** Leader election: the mutex's lease with the leader's value, kept apart in `<dir>/.elections/`. */
  readonly election: FileElection
  /** Counting semaphores: one record per semaphore, kept apart in `<dir>/.semaphores/`. */
  readonly semaphore: SemaphoreFacet
  /** Read-write locks: one record per lock, kept apart in `<dir>/.rwlocks/`. */
  readonly rwlock: RwLockFacet
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
    seenBy: new BoundedMap(SEEN_BY_LIMIT),
    seen: seenEpochs(dir),
    starts: startsOf(dir, boot, durability),
  }
  const retirer = new FolderRetirer(hooks?.retireAfterMs ?? DEFAULT_RETIRE_AFTER_MS)
  const sweeper = sweeperOf(root, hooks, LEASE_RECORDS)
  // Elections: a root of their own inside this one, with its own housekeeping (election/index.ts).
  const elections = electionRoot(root, options.unreadableHoldMs ?? 60_000)
  const electionRetirer = new FolderRetirer(hooks?.retireAfterMs ?? DEFAULT_RETIRE_AFTER_MS)
  const electionSweeper = sweeperOf(elections, hooks, LEASE_RECORDS)
  // Semaphores: likewise (semaphore/index.ts).
  const sems = semaphoreRoot(root, options.unreadableHoldMs ?? 60_000)
  const semaphoreRetirer = new FolderRetirer(hooks?.retireAfterMs ?? DEFAULT_RETIRE_AFTER_MS)
  const semaphoreSweeper = sweeperOf(sems, hooks, SEMAPHORE_RECORDS)
  // Read-write locks: likewise (rwlock/index.ts).
  const rws = rwlockRoot(root, options.unreadableHoldMs ?? 60_000)
  const rwlockRetirer = new FolderRetirer(hooks?.retireAfterMs ?? DEFAULT_RETIRE_AFTER_MS)
  const rwlockSweeper = sweeperOf(rws, hooks, RWLOCK_RECORDS)
  const shell = {
    id: root.id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },
    limits: FILE_LIMITS,
  } as const
  return {
    ...shell,
    ...fileMutex(root, { retirer, sweeper }),
    election: fileElection(dir, elections, { retirer: electionRetirer, sweeper: electionSweeper }, shell),
    semaphore: fileSemaphore(dir, sems, { retirer: semaphoreRetirer, sweeper: semaphoreSweeper }, shell),
    rwlock: fileRwLock(dir, rws, { retirer: rwlockRetirer, sweeper: rwlockSweeper }, shell),
    multiKeyRefusal:
      'each key is a folder of its own, and a file system has no step that creates several at once',
    prune: (prefix = '') => guarded(root, prefix, 'prune', () => prune(root, LEASE_RECORDS, prefix)),
    doctor: () => fileDoctor(root, LEASE_RECORDS),
    async close() {
      sweeper?.close()
      retirer.close()
      electionSweeper?.close()
      electionRetirer.close()
      semaphoreSweeper?.close()
      semaphoreRetirer.close()
      rwlockSweeper?.close()
      rwlockRetirer.close()
    },
  }
}

/** The backend's sweep (sweep.ts), with the tests' settings if any; none when it never sweeps. */
function sweeperOf<R extends object>(root: Root, hooks: FileTestHooks | undefined, records: SweptRecords<R>) {
  const test = testSweepMs()
  const afterMs = hooks?.sweepAfterMs ?? test ?? DEFAULT_SWEEP_AFTER_MS
  if (afterMs === Number.POSITIVE_INFINITY) return undefined
  const everyMs = hooks?.sweepEveryMs ?? test ?? DEFAULT_SWEEP_EVERY_MS
  return new RootSweeper(root, records, afterMs, everyMs)
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
