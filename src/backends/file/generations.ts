/**
 * The generation store under one folder: the highest generation file is the state, and a new state is
 * created exclusively as generation N+1 (see docs/backends/file.md for the whole design: fences, epochs, removals).
 * Everything here is one atomic step or a read; the primitives compose them, and each reads its own
 * records (`readState` takes the parser: the mutex's is mutex/records.ts).
 *
 * Metadata calls (list, read, stat, create, link, unlink) are synchronous on purpose: on a local file
 * system each takes microseconds, far less than a hop through libuv's thread pool, and the lock cycle is
 * a chain of them. Only fsync, which can take milliseconds, stays asynchronous.
 */
import { createHash, randomBytes } from 'node:crypto'
import {
  closeSync,
  fstatSync,
  fsync,
  linkSync,
  openSync,
  readdirSync,
  readSync,
  statSync,
  unlinkSync,
  writeSync,
} from 'node:fs'
import { open } from 'node:fs/promises'
import { sep } from 'node:path'

/**
 * Which file a generation name pointed to when it was read: its inode and its modification time (set once,
 * by the write before the link; nothing writes a generation file afterwards). A later stat that finds the
 * same stamp under the same name found the same file, hence the same folder: see `commit`.
 */
export interface Stamp {
  readonly dev: bigint
  readonly ino: bigint
  readonly mtimeNs: bigint
}

/** A folder's state: its highest generation and that file's record, as a primitive's `parse` reads it. */
export type Current<R extends object> =
  | { readonly gen: bigint; readonly record: R; readonly names: string[]; readonly stamp: Stamp }
  | { readonly gen: bigint; readonly record: 'unreadable'; readonly names: string[]; readonly stamp: Stamp }
  | { readonly gen: 0n; readonly record: 'none'; readonly names: string[]; readonly missing: boolean }

/**
 * The one way the file backend flushes to disk: every fsync it makes goes through a Flush, which counts
 * them (the tests read `count` to show that a grant within a boot makes none). A store written with no
 * Flush (undefined) is not synced: it lives in the page cache, which every process of the host shares and
 * which survives any process crash; only a power loss or a kernel crash (a reboot) loses it.
 */
export class Flush {
  count = 0

  /** fsync an open file. */
  async fd(fd: number): Promise<void> {
    await new Promise<void>((done, fail) => fsync(fd, (e) => (e ? fail(e) : done())))
    this.count++
  }

  /** fsync a folder (its names) or a file by path. */
  async path(path: string): Promise<void> {
    const handle = await open(path, 'r')
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
    this.count++
  }
}

export const GEN_NAME = /^\d{1,20}$/
const TMP_PREFIX = '.tmp-'
/**
 * This process's temp names: `.tmp-<random, once per process>-<counter>`. A name never repeats, in any
 * folder (the pin of `Pending` needs exactly that), and drawing it costs no call to the random source.
 */
const TMP_OURS = `${TMP_PREFIX}${randomBytes(8).toString('hex')}-`
let tmpCount = 0
/** A temp file older than this belongs to a crashed writer (a live one links it within milliseconds). */
const TMP_STALE_MS = 10 * 60_000

export const genName = (gen: bigint) => gen.toString().padStart(20, '0')

/**
 * The path of `name` in `folder`: a key folder is absolute and normalised (`resolve`d root, a name with no
 * separator), so a concatenation does what `join` would, without its normalising pass on every call.
 */
const inFolder = (folder: string, name: string): string => `${folder}${sep}${name}`

/** A folder name for any key: a readable prefix for humans, the hash for uniqueness. */
export function keyFolderName(key: string): string {
  const readable = key
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '_')
    .replace(/^[._]+/, '')
    .slice(0, 40)
  const hash = createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 32)
  return `${readable}~${hash}`
}

const errno = (error: unknown) => (error as NodeJS.ErrnoException)?.code

/** The highest generation number among `names`, 0 when there is none. */
export function highest(names: readonly string[]): bigint {
  let gen = 0n
  for (const name of names) {
    if (GEN_NAME.test(name)) {
      const g = BigInt(name)
      if (g > gen) gen = g
    }
  }
  return gen
}

/**
 * Reads one generation file and its stamp: open, fstat, read, close (what readFileSync does anyway, so
 * the stamp costs no extra system call). Undefined when the name is gone.
 */
function readGeneration(path: string): { text: string; stamp: Stamp } | undefined {
  let fd: number
  try {
    fd = openSync(path, 'r')
  } catch (error) {
    if (errno(error) === 'ENOENT') return undefined
    throw error
  }
  try {
    const info = fstatSync(fd, { bigint: true })
    const size = Number(info.size)
    const buffer = Buffer.allocUnsafe(size)
    let read = 0
    while (read < size) {
      const n = readSync(fd, buffer, read, size - read, read)
      if (n === 0) break
      read += n
    }
    return {
      text: buffer.toString('utf8', 0, read),
      stamp: { dev: info.dev, ino: info.ino, mtimeNs: info.mtimeNs },
    }
  } finally {
    closeSync(fd)
  }
}

/**
 * Reads the highest generation, its record read by `parse` (undefined: unreadable). A concurrent GC may
 * delete what we listed: then list again.
 */
export async function readState<R extends object>(
  folder: string,
  parse: (text: string) => R | undefined,
): Promise<Current<R>> {
  // for (;;) stays here: not a retry (no failure, no wait); it lists again only when the listed name vanished.
  for (;;) {
    let names: string[]
    try {
      names = readdirSync(folder)
    } catch (error) {
      if (errno(error) === 'ENOENT') return { gen: 0n, record: 'none', names: [], missing: true }
      throw error
    }
    const gen = highest(names)
    if (gen === 0n) return { gen, record: 'none', names, missing: false }
    const file = readGeneration(inFolder(folder, genName(gen)))
    if (!file) continue
    const record = parse(file.text)
    if (record === undefined) return { gen, record: 'unreadable', names, stamp: file.stamp }
    return { gen, record, names, stamp: file.stamp }
  }
}

/**
 * What the listing taken just after linking generation `gen` says of it. 'superseded': a higher
 * generation exists, so ours is not the state (a stale link, or a successor that followed at once). It is
 * left in place: nobody reads a name below the highest, the next transition collects it, and removing it
 * could pull the predecessor from under a successor built on it, which then sees its predecessor gone and
 * stands back too, leaving the key to the older record (a holder that just released, say) until that
 * record's ttl. 'orphaned': the predecessor we succeeded (`hasPredecessor`) is gone with no successor of
 * ours: files removed behind our back; ours is removed, nobody may build on it. 'stands': ours is the state.
 */
export function afterLink(
  names: readonly string[],
  gen: bigint,
  hasPredecessor: boolean,
): 'stands' | 'superseded' | 'orphaned' {
  if (names.some((name) => GEN_NAME.test(name) && BigInt(name) > gen)) return 'superseded'
  if (hasPredecessor && !names.includes(genName(gen - 1n))) return 'orphaned'
  return 'stands'
}

/**
 * A record on its way to becoming a generation. Opening it creates the temp file in the folder at once,
 * and that file PINS the folder: a directory that holds a file cannot be removed (rmdir fails with
 * ENOTEMPTY), and `rm -rf`, which unlinks the file first, makes our link fail with ENOENT (the link
 * looks the temp file up by its path, and its name exists in no other folder). So from `open` to
 * `commit`, the folder at this path stays the very folder the temp file was created in, or the commit
 * fails. A folder that is moved away takes the temp file with it: the same ENOENT.
 */
export class Pending {
  readonly #folder: string
  readonly #path: string
  #fd: number | undefined
  #removed = false
  #linked = false
  /** The generation `holds` found in place (after the pin): `commit` need not look again. */
  #held: bigint | undefined

  /** @throws ENOENT when the folder is missing (the caller decides whether to recreate it) */
  constructor(folder: string) {
    this.#folder = folder
    this.#path = inFolder(folder, `${TMP_OURS}${(tmpCount++).toString(36)}`)
    this.#fd = openSync(this.#path, 'wx')
  }

  /**
   * Whether name `gen` is still the very file `stamp` was taken from (same name, inode and mtime): then it
   * is in this folder, the one our temp file pins, and it is the record that stamp's reader or writer saw.
   * One stat; a state read by someone else's folder, or gone, or replaced, answers false.
   */
  holds(gen: bigint, stamp: Stamp): boolean {
    const now = statSync(inFolder(this.#folder, genName(gen)), { bigint: true, throwIfNoEntry: false })
    const same =
      now !== undefined && now.ino === stamp.ino && now.dev === stamp.dev && now.mtimeNs === stamp.mtimeNs
    if (same) this.#held = gen
    return same
  }

  /**
   * Writes the record; with `flush`, it is on disk before its name can appear (a power loss keeps it whole).
   * Returns the record's stamp (the fstat of the open file: no extra lookup), which names this very file
   * to the next transition (`holds`): linking it changes neither its inode nor its mtime.
   */
  async write(content: object, flush: Flush | undefined): Promise<Stamp> {
    const fd = this.#fd!
    writeSync(fd, JSON.stringify(content))
    if (flush) await flush.fd(fd)
    const info = fstatSync(fd, { bigint: true })
    closeSync(fd)
    this.#fd = undefined
    return { dev: info.dev, ino: info.ino, mtimeNs: info.mtimeNs }
  }

  /**
   * Links the record as generation `gen`: a compare-and-swap against the state `gen - 1` the caller read
   * (`after`, the stamp of that read; or none when the read found no generation after the pin). Returns
   * the folder's names just after the link (for `collect`), or false when another writer created `gen`
   * first, when `gen - 1` is no longer the file the caller read, when the folder went away, or when the
   * name was free only because it had been created, superseded and collected meanwhile (ABA, see below).
   */
  async commit(gen: bigint, flush: Flush | undefined, after?: Stamp): Promise<string[] | false> {
    try {
      return await this.#commit(gen, flush, after)
    } finally {
      // After a link the temp name is no longer needed; without one, the record is abandoned.
      this.discard()
    }
  }

  async #commit(gen: bigint, flush: Flush | undefined, after?: Stamp): Promise<string[] | false> {
    const target = inFolder(this.#folder, genName(gen))
    // The read that decided this write named a file; the folder may have been removed and recreated since
    // (a tmp cleaner, an operator) and even advanced to the same generation. Same name, same inode and
    // same mtime: the same file, so the same folder, and our temp file pins that folder from here to the
    // link. Anything else: the state we read is gone, and so is our right to succeed it. (Checked once:
    // a `holds` after the pin already did.)
    if (after && this.#held !== gen - 1n && !this.holds(gen - 1n, after)) return false
    try {
      // The atomic step: link() creates the name or fails with EEXIST; of all writers that read state
      // gen - 1, exactly one gets here first.
      linkSync(this.#path, target)
      this.#linked = true
    } catch (error) {
      const code = errno(error)
      // EEXIST: someone else won; ENOENT: the folder (and with it our temp file) was removed.
      if (code === 'EEXIST' || code === 'ENOENT') return false
      throw error
    }
    this.discard()
    // ABA: a writer that read state N long ago may find name N+1 free again because N+1 was created,
    // superseded by N+2 and collected. link() then succeeds on a stale state. The highest generation is
    // never deleted, so a stale name is always below it: list again, and if anything is higher, our
    // generation never was the state (or it was, and a successor followed at once: the two look alike).
    // Likewise when the state we succeeded has vanished without a successor (its files deleted behind
    // our back): only a higher generation may ever remove it, so we succeeded nothing; stand back, and
    // the next attempt finds the folder as it really is.
    let names: string[]
    try {
      names = readdirSync(this.#folder)
    } catch (error) {
      // The folder was removed right after our link, and our record with it: nothing was created.
      if (errno(error) === 'ENOENT') return false
      throw error
    }
    const verdict = afterLink(names, gen, after !== undefined)
    if (verdict === 'orphaned') {
      try {
        unlinkSync(target)
      } catch {}
    }
    if (verdict !== 'stands') return false
    // With `flush`, the new name must survive a power loss too. (A folder removed just now fails this with
    // ENOENT: the caller reports the store unavailable and retries.)
    if (flush) await flush.path(this.#folder)
    return names
  }

  /**
   * Whether `commit` linked the record, whatever it answered: a commit that lost only after its link (a
   * higher generation was there at once) may still have been the state, and a successor built on it.
   */
  get linked(): boolean {
    return this.#linked
  }

  /** Closes and removes the temp file; safe to call more than once. */
  discard(): void {
    if (this.#fd !== undefined) {
      try {
        closeSync(this.#fd)
      } catch {}
      this.#fd = undefined
    }
    if (this.#removed) return
    this.#removed = true
    try {
      unlinkSync(this.#path)
    } catch {}
  }
}

/** A pending record in `folder`, or undefined when the folder is gone (it was removed meanwhile). */
export function pendingIn(folder: string): Pending | undefined {
  try {
    return new Pending(folder)
  } catch (error) {
    if (errno(error) === 'ENOENT') return undefined
    throw error
  }
}

/**
 * Creates generation `gen` exclusively, in one go: see `Pending`. `after` is the stamp of the state
 * `gen - 1` the caller read (omit it only when that read found no generation and the folder was pinned
 * before it). The record is complete on disk before its name exists, so readers never see half a record.
 * Returns the folder's names after the link (for `collect`), or false when it lost.
 * @throws ENOENT when the folder is missing
 */
export async function createGeneration(
  folder: string,
  gen: bigint,
  record: object,
  flush: Flush | undefined,
  after?: Stamp,
): Promise<string[] | false> {
  const pending = new Pending(folder)
  try {
    await pending.write(record, flush)
    return await pending.commit(gen, flush, after)
  } finally {
    pending.discard()
  }
}

/**
 * Deletes generations below `gen` (never `gen` itself: the highest generation is the state and the fence
 * counter), and temp files a crashed writer left behind. `names` is a listing taken after `gen` was
 * linked (what `commit` returns). Synchronous like every metadata call here; this process's own temp
 * files are never a crashed writer's (each is removed by the writer that made it, before it returns).
 */
export function collect(folder: string, gen: bigint, names: readonly string[]): void {
  for (const name of names) {
    if (GEN_NAME.test(name)) {
      if (BigInt(name) < gen) {
        try {
          unlinkSync(inFolder(folder, name))
        } catch {}
      }
    } else if (name.startsWith(TMP_PREFIX) && !name.startsWith(TMP_OURS)) {
      const path = inFolder(folder, name)
      const info = statSync(path, { throwIfNoEntry: false })
      if (info && Date.now() - info.mtimeMs > TMP_STALE_MS) {
        try {
          unlinkSync(path)
        } catch {}
      }
    }
  }
}
