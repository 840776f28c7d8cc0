/**
 * file:///dir — the embedded default: locks shared by every process on ONE host through a directory.
 *
 * Storage layout, under the lock root `<dir>`:
 *   <dir>/<readable-prefix>~<sha256(key), 32 hex>/   one folder per key (hashed, so any key works and keys
 *                                                    differing only in case stay distinct everywhere)
 *       00000000000000000007                         generation files: the highest is the state
 *       .tmp-<random>                                a record being written (or a crashed writer's)
 *   <dir>/.epoch/00000000000000000003                the root's epoch counter: the highest name is the
 *                                                    latest epoch issued (see epochs.ts)
 * A generation file is a JSON record `{ v: 1, key, state: 'held' | 'free', owner, fence, base, boot, deadline }`.
 * Every transition (acquire, extend, release) creates generation N+1 *exclusively*: the record is written
 * to a temp file, then `link()`ed to the name N+1. link() fails with EEXIST if the name exists, so of
 * several contenders that all read state N exactly one wins: a compare-and-swap on the generation, with no
 * lock files to go stale and no partial records (a record is complete before its name appears).
 *
 * Where the fence comes from: every record carries a `base`, and the fence of generation g is `base + g`.
 * A transition copies the base of the state it succeeds, so within a folder fences grow with generations,
 * for free. A folder with no generation (a new key, or one whose folder or files were removed: the two look
 * the same) starts afresh: the contender takes a new epoch E from `<dir>/.epoch` and races, like everyone,
 * for the name 1, with the base that makes its fence E·2^21 + 1. Epochs only grow, and a range holds
 * 2^21 fences, so the new folder's fences exceed every fence minted before for that key, whatever folder
 * held them. The same fresh start is taken over an unreadable record (its base is unknown) and when a
 * range is used up (2^21 generations; the next one takes a new epoch: there is no "beyond", and the
 * generation names themselves stay far below 20 digits: fences are never names). Losers of
 * the race for name 1 merely leave gaps in the epochs. An epoch is issued once, durably when fsync is on
 * (a power loss must not issue it again). Records from before epochs have no base: it is 0.
 *
 * What could reset fences: removing the whole lock root, or its `.epoch` folder (a reboot of a root on
 * tmpfs, a tmp cleaner): the epochs start over, but at the wall clock in ms (epochs.ts), which is past
 * every epoch issued before unless the clock was set back meanwhile. Removing a key's folder never does.
 * Removing only its newest generation file while older ones remain lets the next grant repeat that
 * generation's fence: `isOurs` then keeps the old holder from mistaking the new grant for its own.
 *
 * The race with a removal, and why it is closed: a contender reads state N of folder F, F is removed (and
 * recreated, maybe advanced to the same N by others), and the contender links N+1 with F's base into the
 * new folder — a stale fence, and a second holder. Two things stop it. (1) Before linking, the writer
 * creates its temp file in the folder and then checks, with one stat, that the name N it read is still the
 * same file (inode and mtime, taken for free when it read the record): the same file means the same folder.
 * From then on the temp file PINS that folder: a folder holding a file cannot be removed, and `rm -rf`,
 * which unlinks the temp file first, makes the link fail with ENOENT (the link finds the temp file by its
 * path, and its random name exists in no other folder). So the link lands in the folder that was read, or
 * nowhere. (2) A contender that found no generation first pins the folder with its temp file, reads it
 * again, and only then takes its epoch: the link lands in the pinned folder (or fails), and the epoch is
 * taken after every removal that preceded the pin, so it exceeds every epoch any earlier folder used.
 * (Comparing the folder's own inode before the read and after the link would not do: ext4 and XFS reuse
 * a removed directory's inode number at once, and an undo after the link comes too late for a reader
 * that already acted on the stale record.) Where a removal's
 * `rm -rf` deletes files one by one during a transition, the check after the link (the predecessor N must
 * still be there, and no higher name) makes the writer stand back. The residual risk is a name reused with
 * the same inode number AND the same mtime tick (a few ms), by a folder removed, recreated and advanced to
 * that generation inside that tick: not a thing a cleaner or an operator does.
 * The hot path pays one stat for all this: acquire, extend and release on an existing folder make no
 * other extra call, and never touch `.epoch`.
 *
 * Expiry of a dead holder: the record's `deadline` is on the host's monotonic clock (CLOCK_MONOTONIC via
 * process.hrtime, shared by all processes of one boot and immune to wall-clock steps), tagged with the boot
 * id; a record from another boot has expired.
 * Waiting: fs.watch on the key's folder, with the core's poll as the fallback.
 * Errors: a folder that cannot be created or written (EACCES, EPERM, ENOTDIR, EROFS, ENOSPC, …) is a
 * setting, not an outage: the acquire fails at once, naming the path and the reason.
 * Limits: one host only (not NFS: link() and watch semantics differ there). The monotonic clock stops while
 * the machine sleeps, so leases stretch across a suspend. An unreadable record (corrupt, or from a newer
 * version) is treated as held until this process has seen it unchanged for `unreadableHoldMs`. All the
 * processes sharing a root must run a version with epochs: an older one numbers fences by generation only.
 */
import { randomBytes } from 'node:crypto'
import { mkdirSync, watch } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import type {
  AcquireRequest,
  AttemptResult,
  BackendLimits,
  DoctorFinding,
  HeldLease,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { BackendUnavailableError, causeText, LockError, quoteKey } from '../../core/errors.js'
import { type ParamSchema, readParams } from '../../core/url.js'
import { baseFor, bumpEpoch, currentEpoch, EPOCH_FOLDER, epochOf, RANGE } from './epochs.js'
import {
  baseOf,
  type Current,
  collect,
  createGeneration,
  keyFolderName,
  Pending,
  type RecordV1,
  readCurrent,
} from './generations.js'
import { bootId, monotonicMs, sameBoot } from './host-clock.js'

export interface FileBackendOptions {
  /** The folder holding the locks; created if missing. Every process that shares locks must use the same one. */
  readonly dir: string
  /**
   * fsync each acquiring record, its folder and each new epoch before granting, so a power loss cannot
   * hand out the same fence twice. Extends and releases never need it: after a crash the boot id changes
   * and every lease has ended anyway.
   * @default true
   */
  readonly fsync?: boolean | undefined
  /**
   * How long an unreadable record must be seen unchanged before it counts as expired.
   * @default 60000
   */
  readonly unreadableHoldMs?: number | undefined
}

/** The file backend, plus `breakLock` to end a lease behind its holder's back (for operators and tests). */
export interface FileBackend extends LockBackend {
  /** Ends the current lease of `key` by writing a free record; its holder finds out on its next renewal. */
  breakLock(key: string): Promise<void>
}

/**
 * What the file backend can represent. Keys: any length works for the folder name (it is a hash), but the
 * record stores the key and every attempt reads the record: 64 KiB keeps that a few pages. Ttl: the
 * record's deadline is the monotonic clock (ms since boot, below 2^43 for 278 years of uptime) plus the
 * ttl; with ttl ≤ 2^43 the sum stays below 2^44, where a double holds every integer ms exactly (with
 * 4 µs to spare) and JSON gives it back bit for bit.
 */
export const FILE_LIMITS: BackendLimits = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 43 }

/** errno codes that repeat until someone changes a setting (a path, a permission, a mount), in plain words. */
const SETTING_ERRORS: Readonly<Record<string, string>> = {
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOTDIR: 'a part of the path is a file, not a folder',
  EEXIST: 'a file is in the way where the folder must be',
  EROFS: 'the file system is mounted read-only',
  ENOSPC: 'no space left on the device',
  EDQUOT: "the user's disk quota is used up",
  ELOOP: 'too many symbolic links in the path',
  ENAMETOOLONG: 'the path is too long',
}

/** Backend-private state of a grant: the generation we hold and its base (together, one record, ever). */
interface Cookie {
  readonly gen: bigint
  readonly base: bigint
}

/** What an attempt found: someone's live lease, our own (a lost reply), or a state we may succeed. */
type Plan =
  | { readonly act: 'answer'; readonly result: AttemptResult }
  /** `base` undefined: start a fresh range (no generation, or an unreadable one). */
  | { readonly act: 'take'; readonly base: bigint | undefined }

/**
 * Creates the file backend.
 * @example
 * const locks = createLockClient(fileBackend({ dir: '/var/lock/myapp' }))
 */
export function fileBackend(options: FileBackendOptions): FileBackend {
  if (typeof options?.dir !== 'string' || options.dir === '') {
    throw new TypeError('Expected `dir` to be a folder path for the file backend, e.g. /var/lock/myapp')
  }
  const dir = resolve(options.dir)
  const fsync = options.fsync ?? true
  const unreadableHoldMs = options.unreadableHoldMs ?? 60_000
  const id = `file://${dir}`
  const boot = bootId()
  /** First time this process saw an unreadable generation, per folder: the observed-expiry clock. */
  const unreadableSince = new Map<string, { gen: bigint; since: number }>()

  const fail = (key: string, what: string, cause: unknown): never => {
    if (cause instanceof LockError) throw cause
    const code = (cause as NodeJS.ErrnoException)?.code
    const plain = code === undefined ? undefined : SETTING_ERRORS[code]
    if (plain !== undefined) {
      const path = (cause as NodeJS.ErrnoException).path ?? dir
      throw new BackendUnavailableError(
        `File backend ${id} cannot create or write ${path} for lock ${quoteKey(key)}: ${code} (${plain}). ` +
          'This is a setting, not an outage: fix the lock folder path, its permissions or its file system; every ' +
          'process that shares these locks must be able to create folders and files in it',
        { key, backend: id, cause, retryable: false },
      )
    }
    throw new BackendUnavailableError(
      `File backend ${id} could not ${what} for lock ${quoteKey(key)}: ${causeText(cause)}. ` +
        'Check that the folder exists on a local file system and is writable by this user',
      { key, backend: id, cause },
    )
  }

  const folderOf = (key: string) => join(dir, keyFolderName(key))

  /** A pending record in `folder`, or undefined when the folder is gone (it was removed meanwhile). */
  const pendingIn = (folder: string): Pending | undefined => {
    try {
      return new Pending(folder)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
      throw error
    }
  }

  /**
   * The base for generation `gen` succeeding a state of base `base`: the same one (fences go on from it),
   * or a new epoch's when there is none to go on from or the range is used up. A new epoch is only ever
   * taken after the read that found the state, so it exceeds every epoch of every fence minted before.
   */
  const baseForNext = async (base: bigint | undefined, gen: bigint): Promise<bigint> => {
    if (base !== undefined && (base + gen) % RANGE !== 0n) return base
    const floor = base === undefined ? 0n : epochOf(base + gen - 1n)
    return baseFor(await bumpEpoch(dir, floor, fsync), gen)
  }

  const isLive = (record: RecordV1) =>
    record.state === 'held' && sameBoot(record.boot, boot) && monotonicMs() < record.deadline

  /** An unreadable record counts as held until this process has seen it unchanged for unreadableHoldMs. */
  const unreadableRemaining = (folder: string, gen: bigint): number => {
    const seen = unreadableSince.get(folder)
    if (!seen || seen.gen !== gen) {
      unreadableSince.set(folder, { gen, since: now() })
      return unreadableHoldMs
    }
    return seen.since + unreadableHoldMs - now()
  }

  const record = (
    key: string,
    state: 'held' | 'free',
    owner: string | null,
    fence: bigint,
    base: bigint,
    deadline: number,
    holder?: string,
  ) =>
    ({
      v: 1,
      key,
      state,
      owner,
      fence: fence.toString(),
      base: base.toString(),
      boot,
      deadline,
      ...(holder === undefined ? {} : { holder }),
    }) satisfies RecordV1

  const plan = (folder: string, current: Current, owner: string): Plan => {
    if (current.record === 'none') return { act: 'take', base: undefined }
    if (current.record === 'unreadable') {
      const remaining = unreadableRemaining(folder, current.gen)
      if (remaining > 0) return { act: 'answer', result: { granted: false, retryInMs: remaining } }
      return { act: 'take', base: undefined }
    }
    const r = current.record
    if (!isLive(r)) return { act: 'take', base: baseOf(r) }
    if (r.owner === owner) {
      // An earlier attempt of this same acquire won and its reply was lost: it is ours.
      // Its lease is what is left of that attempt's deadline, not a fresh ttl.
      const cookie: Cookie = { gen: current.gen, base: baseOf(r) }
      const ttlMs = r.deadline - monotonicMs()
      return { act: 'answer', result: { granted: true, fence: BigInt(r.fence), ttlMs, cookie } }
    }
    return { act: 'answer', result: { granted: false, retryInMs: r.deadline - monotonicMs() } }
  }

  /**
   * Whether `current` is the very record `cookie` names: same generation and same base, and written for
   * `owner`. Generation and base alone name one record only while nobody removes files by hand: removing
   * the newest generation while an older one remains (in a shared folder, another user's, which the
   * sticky bit keeps) lets the next grant re-use its number and base. The owner check keeps the holder
   * of the removed record from taking that grant for its own: it learns that its lock is lost.
   */
  const isOurs = (
    current: Current,
    cookie: Cookie,
    owner: string,
  ): current is Extract<Current, { record: RecordV1 }> =>
    current.record !== 'none' &&
    current.record !== 'unreadable' &&
    current.gen === cookie.gen &&
    baseOf(current.record) === cookie.base &&
    current.record.owner === owner

  /** Moves a lease we hold from its generation to the next one; undefined when it is no longer ours. */
  const transition = async (
    lease: HeldLease,
    next: (base: bigint, current: RecordV1) => RecordV1,
  ): Promise<Cookie | undefined> => {
    const cookie = lease.cookie as Cookie
    const folder = folderOf(lease.key)
    const current = await readCurrent(folder)
    // Only the holder writes after its own record while its lease lives; any other record means the lease
    // expired and someone took over, or it was broken, or its folder was removed (a new folder's records
    // have another base, even at the same generation).
    if (!isOurs(current, cookie, lease.owner)) return undefined
    // The temp file pins the folder; commit() checks that it is the folder we read (see the header).
    const pending = pendingIn(folder)
    if (!pending) return undefined
    try {
      const gen = current.gen + 1n
      const base = await baseForNext(cookie.base, gen)
      await pending.write(next(base, current.record), false)
      if (!(await pending.commit(gen, false, current.stamp))) return undefined
      await collect(folder, gen, current.names)
      return { gen, base }
    } finally {
      pending.discard()
    }
  }

  return {
    id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },
    limits: FILE_LIMITS,

    async tryAcquire({ key, owner, ttlMs, holder }: AcquireRequest): Promise<AttemptResult> {
      const folder = folderOf(key)
      let pending: Pending | undefined
      try {
        // The deadline counts from before we read: never later than the lease the core believes in.
        const start = monotonicMs()
        let current = await readCurrent(folder)
        if (current.record === 'none') {
          // No generation: a new key, or its folder or files were removed. (Re)create the folder; a folder
          // that cannot be made is a setting error, thrown as such below.
          mkdirSync(folder, { recursive: true })
          // Pin the folder first, then read it again: whatever we decide next is decided on the folder our
          // link will land in, and a new epoch is taken after every removal that preceded this read.
          pending = pendingIn(folder)
          if (!pending) return { granted: false, retryInMs: 0 }
          current = await readCurrent(folder)
          if (current.record === 'none' && current.missing) return { granted: false, retryInMs: 0 }
        }
        const next = plan(folder, current, owner)
        if (next.act === 'answer') return next.result
        // The temp file pins the folder; commit() checks that it is the folder we read (see the header).
        pending ??= pendingIn(folder)
        // The folder vanished since our read: the next attempt (the core retries at once) recreates it.
        if (!pending) return { granted: false, retryInMs: 0 }
        const gen = current.gen + 1n
        const base = await baseForNext(next.base, gen)
        const fence = base + gen
        await pending.write(record(key, 'held', owner, fence, base, start + ttlMs, holder), fsync)
        const stamp = current.record === 'none' ? undefined : current.stamp
        if (!(await pending.commit(gen, fsync, stamp))) return { granted: false }
        await collect(folder, gen, current.names)
        return { granted: true, fence, ttlMs, cookie: { gen, base } satisfies Cookie }
      } catch (error) {
        return fail(key, 'acquire', error)
      } finally {
        pending?.discard()
      }
    },

    async extend(lease, ttlMs) {
      try {
        const start = monotonicMs()
        // The holder's description goes on from the record we extend (it was written by our own grant).
        const cookie = await transition(lease, (base, current) =>
          record(lease.key, 'held', lease.owner, lease.fence, base, start + ttlMs, current.holder),
        )
        return cookie === undefined ? { renewed: false } : { renewed: true, cookie }
      } catch (error) {
        return fail(lease.key, 'extend', error)
      }
    },

    async release(lease) {
      try {
        const cookie = await transition(lease, (base) =>
          record(lease.key, 'free', null, lease.fence, base, 0),
        )
        return cookie !== undefined
      } catch (error) {
        return fail(lease.key, 'release', error)
      }
    },

    async abandon({ key, owner }) {
      // An attempt whose caller gave up may have linked a held generation for us: free it, owner-checked.
      // The transition is a compare-and-swap on the record we read (generation and base), so a successor,
      // or a new folder's record of the same generation, is never touched.
      try {
        const current = await readCurrent(folderOf(key))
        if (current.record === 'none' || current.record === 'unreadable') return
        if (current.record.state !== 'held' || current.record.owner !== owner) return
        const fence = BigInt(current.record.fence)
        const cookie: Cookie = { gen: current.gen, base: baseOf(current.record) }
        await transition({ key, owner, fence, cookie }, (base) => record(key, 'free', null, fence, base, 0))
      } catch (error) {
        fail(key, 'abandon', error)
      }
    },

    async inspect(key): Promise<LockInfo | null> {
      try {
        // Read only: inspecting never creates a folder.
        const folder = folderOf(key)
        const current = await readCurrent(folder)
        if (current.record === 'none') {
          return {
            held: false,
            note:
              `no record in ${folder}${current.missing ? ' (no folder)' : ''}: the next grant takes a new epoch ` +
              `from ${join(dir, EPOCH_FOLDER)}, so its fence exceeds every fence granted before for this key; ` +
              'removing the whole lock root (or its .epoch folder) restarts epochs at the wall clock in ms, ' +
              'still above them unless the clock was set back',
          }
        }
        if (current.record === 'unreadable') {
          return {
            held: true,
            note:
              `generation ${current.gen} in ${folder} is unreadable (corrupt, or written by a newer fencelock); it ` +
              `counts as held until it has been seen unchanged for ${unreadableHoldMs} ms`,
          }
        }
        const r = current.record
        if (!isLive(r)) return { held: false, fence: BigInt(r.fence) }
        return {
          held: true,
          owner: r.owner ?? '',
          ...(r.holder === undefined ? {} : { holder: r.holder }),
          fence: BigInt(r.fence),
          expiresInMs: r.deadline - monotonicMs(),
        }
      } catch (error) {
        return fail(key, 'inspect', error)
      }
    },

    async waitForChange({ key }, signal) {
      if (signal.aborted) return
      const folder = folderOf(key)
      await new Promise<void>((done) => {
        let watcher: ReturnType<typeof watch> | undefined
        const finish = () => {
          signal.removeEventListener('abort', finish)
          watcher?.close()
          done()
        }
        signal.addEventListener('abort', finish, { once: true })
        try {
          // Any new name in the folder is a new generation (or GC): a hint, never a grant.
          watcher = watch(folder, { persistent: false }, finish)
          watcher.on('error', finish)
        } catch (error) {
          // No folder: the key has no record, so it is free: wake the core, whose next attempt recreates it.
          if ((error as NodeJS.ErrnoException).code === 'ENOENT') finish()
          // Otherwise no watch support here (some network or FUSE file systems): resolving now would make
          // the core spin, so stay pending; its poll timer takes over and aborts this wait.
        }
      })
    },

    async breakLock(key) {
      try {
        const folder = folderOf(key)
        // Bounded: each round loses only to another writer's transition.
        for (let round = 0; round < 100; round++) {
          const current = await readCurrent(folder)
          if (current.record === 'none') return // No record: nothing to break.
          const known = current.record === 'unreadable' ? undefined : current.record
          const gen = current.gen + 1n
          const base = await baseForNext(known ? baseOf(known) : undefined, gen)
          const fence = known ? BigInt(known.fence) : 0n
          const created = await createGeneration(
            folder,
            gen,
            record(key, 'free', null, fence, base, 0),
            false,
            current.stamp,
          ).catch((error: unknown) => {
            if ((error as NodeJS.ErrnoException).code === 'ENOENT') return true // Folder gone: broken.
            throw error
          })
          if (created) return
        }
        throw new Error('the lock kept changing under 100 attempts to break it')
      } catch (error) {
        return fail(key, 'break the lock', error)
      }
    },

    async doctor(): Promise<DoctorFinding[]> {
      const findings: DoctorFinding[] = [{ level: 'info', message: `lock folder: ${dir}` }]
      findings.push(
        boot.startsWith('uptime:')
          ? {
              level: 'warn',
              message: 'no kernel boot id here; reboots are detected from the uptime (±2 min)',
            }
          : { level: 'ok', message: `boot id ${boot}` },
      )
      const probe = await this.tryAcquire(
        { key: '.fencelock-doctor', owner: randomBytes(16).toString('hex'), ttlMs: 1000 },
        AbortSignal.timeout(5000),
      ).catch((error: unknown) => (error instanceof Error ? error : new Error(String(error))))
      if (probe instanceof Error) findings.push({ level: 'error', message: probe.message })
      else if (probe.granted) {
        findings.push({ level: 'ok', message: 'exclusive create with link() works in this folder' })
        await this.release(
          { key: '.fencelock-doctor', owner: '', fence: probe.fence, cookie: probe.cookie },
          AbortSignal.timeout(5000),
        )
      }
      const epochs = join(dir, EPOCH_FOLDER)
      const temporary = ['/tmp', '/var/tmp', '/dev/shm', tmpdir()].some(
        (t) => dir === t || dir.startsWith(t.endsWith(sep) ? t : `${t}${sep}`),
      )
      findings.push({
        level: temporary ? 'warn' : 'info',
        message:
          `fences: epoch ${currentEpoch(dir)} in ${epochs}. Removing a key's folder never lowers its fence; ` +
          'removing the whole lock root (or its .epoch folder) restarts epochs at the wall clock in ms, which ' +
          'keeps fences rising unless the clock is set back. ' +
          (temporary
            ? `This root is in a temporary folder: better make its tmp cleaner (systemd-tmpfiles, tmpreaper) skip ${epochs}`
            : `Keep tmp cleaners away from ${epochs}`),
      })
      findings.push({
        level: fsync ? 'ok' : 'warn',
        message: fsync ? 'fsync on acquire: on' : 'fsync on acquire is off: a power loss may reissue a fence',
      })
      return findings
    },

    async close() {},
  }
}

/** The URL parameters of file:// (the README's table is tested against this). */
export const PARAMS = {
  fsync: {
    type: 'bool',
    default: true,
    doc: 'flush each grant and new epoch to disk (false: faster, but a power loss may repeat a fence)',
  },
} as const satisfies ParamSchema

/** `file:///abs/dir[?fsync=false]`. */
export function fromUrl(url: URL): FileBackend {
  if (url.host !== '') {
    throw new TypeError(
      `Expected a local file URL like file:///var/lock/app, got ${url.href} (host "${url.host}")`,
    )
  }
  const { fsync } = readParams(url, PARAMS)
  return fileBackend({ dir: fileURLToPath(url), fsync })
}
