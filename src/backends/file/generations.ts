/**
 * The generation store under one key's folder: the highest generation file is the state, and a new state
 * is created exclusively as generation N+1 (see index.ts for the whole design). Everything here is one
 * atomic step or a read; the backend composes them.
 *
 * Metadata calls (list, read, create, link, unlink) are synchronous on purpose: on a local file system
 * each takes microseconds, far less than a hop through libuv's thread pool, and the lock cycle is a
 * chain of them. Only fsync, which can take milliseconds, stays asynchronous.
 */
import { createHash, randomBytes } from 'node:crypto'
import { closeSync, linkSync, openSync, readdirSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { open, stat, unlink } from 'node:fs/promises'
import { join } from 'node:path'

export interface RecordV1 {
  readonly v: 1
  readonly key: string
  readonly state: 'held' | 'free'
  readonly owner: string | null
  /** Decimal string: the generation of the acquiring transition. */
  readonly fence: string
  readonly boot: string
  /** ms on the host's monotonic clock. */
  readonly deadline: number
}

export type Current =
  | { readonly gen: bigint; readonly record: RecordV1; readonly names: string[] }
  | { readonly gen: bigint; readonly record: 'none' | 'unreadable'; readonly names: string[] }

export const GEN_NAME = /^\d{1,20}$/
const TMP_PREFIX = '.tmp-'
/** A temp file older than this belongs to a crashed writer (a live one links it within milliseconds). */
const TMP_STALE_MS = 10 * 60_000

export const genName = (gen: bigint) => gen.toString().padStart(20, '0')

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

export function parseRecord(text: string): RecordV1 | undefined {
  try {
    const r = JSON.parse(text) as Partial<RecordV1>
    if (
      r.v === 1 &&
      (r.state === 'held' || r.state === 'free') &&
      typeof r.fence === 'string' &&
      typeof r.boot === 'string' &&
      typeof r.deadline === 'number' &&
      typeof r.key === 'string'
    ) {
      return r as RecordV1
    }
  } catch {}
  return undefined
}

/** Reads the highest generation. A concurrent GC may delete what we listed: then list again. */
export async function readCurrent(folder: string): Promise<Current> {
  for (;;) {
    let names: string[]
    try {
      names = readdirSync(folder)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { gen: 0n, record: 'none', names: [] }
      throw error
    }
    let gen = 0n
    for (const name of names) {
      if (GEN_NAME.test(name)) {
        const g = BigInt(name)
        if (g > gen) gen = g
      }
    }
    if (gen === 0n) return { gen, record: 'none', names }
    let text: string
    try {
      text = readFileSync(join(folder, genName(gen)), 'utf8')
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue
      throw error
    }
    return { gen, record: parseRecord(text) ?? 'unreadable', names }
  }
}

/**
 * Creates generation `gen` exclusively. Returns false when another process created it first, or when
 * it had already been created, superseded and garbage-collected (see below).
 * The record is complete on disk before its name exists, so readers never see half a record.
 */
export async function createGeneration(
  folder: string,
  gen: bigint,
  record: RecordV1,
  durable: boolean,
): Promise<boolean> {
  const tmp = join(folder, `${TMP_PREFIX}${randomBytes(8).toString('hex')}`)
  if (durable) {
    const handle = await open(tmp, 'wx')
    try {
      await handle.writeFile(JSON.stringify(record))
      await handle.sync()
    } finally {
      await handle.close()
    }
  } else {
    const fd = openSync(tmp, 'wx')
    try {
      writeSync(fd, JSON.stringify(record))
    } finally {
      closeSync(fd)
    }
  }
  try {
    linkSync(tmp, join(folder, genName(gen)))
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw error
  } finally {
    try {
      unlinkSync(tmp)
    } catch {}
  }
  // ABA: a writer that read state N long ago may find name N+1 free again because N+1 was created,
  // superseded by N+2 and collected. link() then succeeds on a stale state. The highest generation is
  // never deleted, so a stale name is always below it: list again, and if anything is higher, our
  // generation never was the state. It is removed (it sits below the highest, so nobody reads it).
  const names = readdirSync(folder)
  if (names.some((name) => GEN_NAME.test(name) && BigInt(name) > gen)) {
    try {
      unlinkSync(join(folder, genName(gen)))
    } catch {}
    return false
  }
  if (durable) {
    // The new name must survive a power loss too, or a reboot could hand out this fence again.
    const folderHandle = await open(folder, 'r')
    try {
      await folderHandle.sync()
    } finally {
      await folderHandle.close()
    }
  }
  return true
}

/**
 * Deletes generations below `gen` (never `gen` itself: the highest generation is the state and the fence
 * counter), and temp files a crashed writer left behind.
 */
export async function collect(folder: string, gen: bigint, names: string[]): Promise<void> {
  for (const name of names) {
    if (GEN_NAME.test(name) && BigInt(name) < gen) {
      try {
        unlinkSync(join(folder, name))
      } catch {}
    } else if (name.startsWith(TMP_PREFIX)) {
      const path = join(folder, name)
      const info = await stat(path).catch(() => undefined)
      if (info && Date.now() - info.mtimeMs > TMP_STALE_MS) await unlink(path).catch(() => {})
    }
  }
}
