/**
 * file:///dir — the embedded default: locks shared by every process on ONE host through a directory.
 *
 * Storage: one folder per key, `<dir>/<readable-prefix>~<sha256(key), 32 hex>` (hashed, so any key works and
 * keys differing only in case stay distinct on case-insensitive file systems). In it, one file per state
 * transition, named by its generation N (20 digits): a JSON record
 * `{ v: 1, key, state: 'held' | 'free', owner, fence, boot, deadline }`.
 * The highest generation is the current state. Every transition (acquire, extend, release) creates
 * generation N+1 *exclusively*: the record is written to a temp file, then `link()`ed to the name N+1.
 * link() fails with EEXIST if the name exists, so of several contenders that all read state N exactly one
 * wins: a compare-and-swap on the generation, with no lock files to go stale and no partial records (a
 * record is complete before its name appears).
 * Fence: the generation of the acquiring transition. Generations only grow, and the highest is never
 * deleted, so fences strictly increase for as long as the folder exists (one small folder per key name).
 * Expiry of a dead holder: the record's `deadline` is on the host's monotonic clock (CLOCK_MONOTONIC via
 * process.hrtime, shared by all processes of one boot and immune to wall-clock steps), tagged with the boot
 * id; a record from another boot has expired.
 * Waiting: fs.watch on the key's folder, with the core's poll as the fallback.
 * Limits: one host only (not NFS: link() and watch semantics differ there). The monotonic clock stops while
 * the machine sleeps, so leases stretch across a suspend. An unreadable record (corrupt, or from a newer
 * version) is treated as held until this process has seen it unchanged for `unreadableHoldMs`.
 */
import { randomBytes } from 'node:crypto'
import { mkdirSync, watch } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type {
  AcquireRequest,
  AttemptResult,
  DoctorFinding,
  HeldLease,
  LockBackend,
  LockInfo,
} from '../../core/backend.js'
import { now } from '../../core/clock.js'
import { BackendUnavailableError } from '../../core/errors.js'
import { collect, createGeneration, keyFolderName, type RecordV1, readCurrent } from './generations.js'
import { bootId, monotonicMs, sameBoot } from './host-clock.js'

export interface FileBackendOptions {
  /** The folder holding the locks; created if missing. Every process that shares locks must use the same one. */
  readonly dir: string
  /**
   * fsync each acquiring record and its folder before granting, so a power loss cannot hand out the same
   * fence twice. Extends and releases never need it: after a crash the boot id changes and every lease
   * has ended anyway.
   * @default true
   */
  readonly fsync?: boolean
  /**
   * How long an unreadable record must be seen unchanged before it counts as expired.
   * @default 60000
   */
  readonly unreadableHoldMs?: number
}

/** The file backend, plus `breakLock` to end a lease behind its holder's back (for operators and tests). */
export interface FileBackend extends LockBackend {
  /** Ends the current lease of `key` by writing a free record; its holder finds out on its next renewal. */
  breakLock(key: string): Promise<void>
}

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
  const madeFolders = new Set<string>()
  /** First time this process saw an unreadable generation, per folder: the observed-expiry clock. */
  const unreadableSince = new Map<string, { gen: bigint; since: number }>()

  const fail = (key: string, what: string, cause: unknown): never => {
    throw new BackendUnavailableError(
      `File backend ${id} could not ${what} for lock "${key}": ${(cause as Error)?.message ?? cause}. ` +
        'Check that the folder exists on a local file system and is writable by this user',
      { key, backend: id, cause },
    )
  }

  const folderOf = async (key: string): Promise<string> => {
    const folder = join(dir, keyFolderName(key))
    if (!madeFolders.has(folder)) {
      mkdirSync(folder, { recursive: true })
      madeFolders.add(folder)
    }
    return folder
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
    deadline: number,
  ) => ({ v: 1, key, state, owner, fence: fence.toString(), boot, deadline }) satisfies RecordV1

  /** Moves a lease we hold from generation `cookie` to the next one; false when it is no longer ours. */
  const transition = async (lease: HeldLease, next: (gen: bigint) => RecordV1) => {
    const folder = await folderOf(lease.key)
    const current = await readCurrent(folder)
    // Only the holder writes after its own generation while its lease lives; any other generation means
    // the lease expired and someone took over (or it was broken).
    if (current.gen !== lease.cookie) return undefined
    const gen = current.gen + 1n
    if (!(await createGeneration(folder, gen, next(gen), false))) return undefined
    await collect(folder, gen, current.names)
    return gen
  }

  return {
    id,
    capabilities: { expiry: 'server-ttl', notify: true, fifo: false },

    async tryAcquire({ key, owner, ttlMs }: AcquireRequest): Promise<AttemptResult> {
      try {
        const folder = await folderOf(key)
        // The deadline counts from before we read: never later than the lease the core believes in.
        const start = monotonicMs()
        const current = await readCurrent(folder)
        if (current.record === 'unreadable') {
          const remaining = unreadableRemaining(folder, current.gen)
          if (remaining > 0) return { granted: false, retryInMs: remaining }
        } else if (current.record !== 'none' && isLive(current.record)) {
          if (current.record.owner === owner) {
            // An earlier attempt of this same acquire won and its reply was lost: it is ours.
            return { granted: true, fence: BigInt(current.record.fence), ttlMs, cookie: current.gen }
          }
          return { granted: false, retryInMs: current.record.deadline - monotonicMs() }
        }
        const gen = current.gen + 1n
        if (!(await createGeneration(folder, gen, record(key, 'held', owner, gen, start + ttlMs), fsync))) {
          return { granted: false }
        }
        await collect(folder, gen, current.names)
        return { granted: true, fence: gen, ttlMs, cookie: gen }
      } catch (error) {
        return fail(key, 'acquire', error)
      }
    },

    async extend(lease, ttlMs) {
      try {
        const start = monotonicMs()
        const gen = await transition(lease, () =>
          record(lease.key, 'held', lease.owner, lease.fence, start + ttlMs),
        )
        return gen === undefined ? { renewed: false } : { renewed: true, cookie: gen }
      } catch (error) {
        return fail(lease.key, 'extend', error)
      }
    },

    async release(lease) {
      try {
        const gen = await transition(lease, () => record(lease.key, 'free', null, lease.fence, 0))
        return gen !== undefined
      } catch (error) {
        return fail(lease.key, 'release', error)
      }
    },

    async abandon({ key, owner }) {
      // An attempt whose caller gave up may have linked a held generation for us: free it, owner-checked
      // (the transition is a compare-and-swap on the generation we read, so a successor is never touched).
      try {
        const folder = await folderOf(key)
        const current = await readCurrent(folder)
        if (current.record === 'none' || current.record === 'unreadable') return
        if (current.record.state !== 'held' || current.record.owner !== owner) return
        const lease = { key, owner, fence: BigInt(current.record.fence), cookie: current.gen }
        await transition(lease, () => record(key, 'free', null, lease.fence, 0))
      } catch (error) {
        fail(key, 'abandon', error)
      }
    },

    async inspect(key): Promise<LockInfo | null> {
      try {
        const folder = await folderOf(key)
        const current = await readCurrent(folder)
        if (current.record === 'none') return null
        if (current.record === 'unreadable') {
          return {
            held: true,
            note:
              `generation ${current.gen} in ${folder} is unreadable (corrupt, or written by a newer dlock); it ` +
              `counts as held until it has been seen unchanged for ${unreadableHoldMs} ms`,
          }
        }
        const r = current.record
        if (!isLive(r)) return { held: false, fence: BigInt(r.fence) }
        return {
          held: true,
          owner: r.owner ?? '',
          fence: BigInt(r.fence),
          expiresInMs: r.deadline - monotonicMs(),
        }
      } catch (error) {
        return fail(key, 'inspect', error)
      }
    },

    async waitForChange({ key }, signal) {
      if (signal.aborted) return
      const folder = await folderOf(key)
      await new Promise<void>((done) => {
        let watcher: ReturnType<typeof watch> | undefined
        const finish = () => {
          signal.removeEventListener('abort', finish)
          watcher?.close()
          done()
        }
        try {
          // Any new name in the folder is a new generation (or GC): a hint, never a grant.
          watcher = watch(folder, { persistent: false }, finish)
          watcher.on('error', finish)
        } catch {
          // No watch support (some network or FUSE file systems): the core's poll takes over.
          return finish()
        }
        signal.addEventListener('abort', finish, { once: true })
      })
    },

    async breakLock(key) {
      try {
        const folder = await folderOf(key)
        for (;;) {
          const current = await readCurrent(folder)
          const fence =
            current.record === 'none' || current.record === 'unreadable' ? 0n : BigInt(current.record.fence)
          if (await createGeneration(folder, current.gen + 1n, record(key, 'free', null, fence, 0), false))
            return
        }
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
        { key: '.dlock-doctor', owner: randomBytes(16).toString('hex'), ttlMs: 1000 },
        AbortSignal.timeout(5000),
      ).catch((error: unknown) => (error instanceof Error ? error : new Error(String(error))))
      if (probe instanceof Error) findings.push({ level: 'error', message: probe.message })
      else if (probe.granted) {
        findings.push({ level: 'ok', message: 'exclusive create with link() works in this folder' })
        await this.release(
          { key: '.dlock-doctor', owner: '', fence: probe.fence, cookie: probe.cookie },
          AbortSignal.timeout(5000),
        )
      }
      findings.push({
        level: fsync ? 'ok' : 'warn',
        message: fsync ? 'fsync on acquire: on' : 'fsync on acquire is off: a power loss may reissue a fence',
      })
      return findings
    },

    async close() {},
  }
}

/** `file:///abs/dir[?fsync=false]`. */
export function fromUrl(url: URL): FileBackend {
  if (url.host !== '') {
    throw new TypeError(
      `Expected a local file URL like file:///var/lock/app, got ${url.href} (host "${url.host}")`,
    )
  }
  const fsyncParam = url.searchParams.get('fsync')
  if (fsyncParam !== null && fsyncParam !== 'true' && fsyncParam !== 'false') {
    throw new TypeError(
      `Expected \`fsync\` in ${url.href} to be true or false, got ${JSON.stringify(fsyncParam)}`,
    )
  }
  return fileBackend({ dir: fileURLToPath(url), fsync: fsyncParam !== 'false' })
}
