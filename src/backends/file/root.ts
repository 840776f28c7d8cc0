/**
 * One lock root as this process sees it: its folder, its settings, this boot's id, and what this process
 * has observed of unreadable records. Every operation of the backend takes it.
 */
import { join } from 'node:path'
import { BoundedMap } from '../../core/bounded-map.js'
import { now } from '../../core/clock.js'
import type { EpochSource } from './epochs.js'
import { type Flush, keyFolderName, type Stamp } from './generations.js'
import type { HolderProcesses } from './holders.js'
import type { RecordV1 } from './records.js'

export interface Root extends EpochSource {
  /** The lock root, absolute. */
  readonly dir: string
  /** `file://<dir>`: names the store in errors. */
  readonly id: string
  /** This boot's id (host-clock.ts), written into every record. */
  readonly boot: string
  /** Several users share the root (folders.ts), read once when the backend is made. */
  readonly shared: boolean
  readonly unreadable: UnreadableRecords
  /** The processes every lease granted here lives with (holders.ts); undefined: the ttl alone ends it. */
  readonly processes: HolderProcesses | undefined
  /** What this process wrote last in each key folder (shared by every backend of the process). */
  readonly written: WrittenStates
  /**
   * The generation each acquire still waiting (by owner) found in its latest attempt: its wake-up hint
   * ignores events on generations it has read (watch.ts). Bounded: an acquire that ends without a grant
   * (an abort, a timeout) is forgotten with the oldest, and a forgotten one wakes on any generation.
   */
  readonly seenBy: BoundedMap<string, bigint>
}

/** How many waiting acquires `Root.seenBy` follows at most. */
export const SEEN_BY_LIMIT = 4096

/**
 * A generation this process created: its number, its record, and the stamp of its file. Only a hint of
 * what the folder holds: `Pending.holds` checks, with one stat after the pin, that the name is still that
 * very file before anything is decided on it (it may have been succeeded, collected, or its folder
 * removed, by anyone). Generation files never change once linked, so the same file means the same record.
 */
export interface Written {
  /** The key's folder (so a transition need not hash the key again). */
  readonly folder: string
  readonly gen: bigint
  readonly record: RecordV1
  readonly stamp: Stamp
}

/**
 * How many key folders this process remembers its last write in: 16384 entries of a few hundred bytes
 * (more for long keys or holder descriptions), and the oldest is forgotten first. A forgotten or stale
 * entry costs one listing and one read: what every acquire paid before.
 */
export const WRITTEN_LIMIT = 16_384

/**
 * The last state this process wrote in each key folder, by root and key (`writtenId`: no hash to compute):
 * an acquire of a key this process released (or saw expire) succeeds it without listing the folder or
 * reading the record. One per process: every backend on the same root shares it (entries are checked
 * against the disk before use, so any backend may use any entry).
 */
export class WrittenStates {
  readonly #entries = new BoundedMap<string, Written>(WRITTEN_LIMIT)

  get(id: string): Written | undefined {
    return this.#entries.get(id)
  }

  /** Remembers `written` as the newest state of key `id` (and as the most recently used entry). */
  remember(id: string, written: Written): void {
    this.#entries.renew(id, written)
  }

  forget(id: string): void {
    this.#entries.delete(id)
  }
}

/** A key's entry in `WrittenStates`: its root and the key (no path holds a NUL, so the pair is one string). */
export const writtenId = (root: Root, key: string): string => `${root.dir}\0${key}`

/** The one table of this process (see `WrittenStates`). */
export const WRITTEN = new WrittenStates()

/** The flush for a grant's own record: only where durability is paid per acquire (no boot id). */
export const grantFlush = (root: Root): Flush | undefined =>
  root.durability === 'acquire' ? root.flush : undefined

/** The folder of `key` in the root. */
export const folderOf = (root: Root, key: string): string => join(root.dir, keyFolderName(key))

/**
 * The observed-expiry clock of unreadable records: one counts as held until this process has seen it
 * unchanged (the same generation of the same folder) for `holdMs`.
 */
export class UnreadableRecords {
  /** First time this process saw an unreadable generation, per folder. */
  readonly #since = new Map<string, { gen: bigint; since: number }>()

  constructor(readonly holdMs: number) {}

  /** How long generation `gen` of `folder` still counts as held; 0 or less when it counts as expired. */
  remainingMs(folder: string, gen: bigint): number {
    const seen = this.#since.get(folder)
    if (!seen || seen.gen !== gen) {
      this.#since.set(folder, { gen, since: now() })
      return this.holdMs
    }
    return seen.since + this.holdMs - now()
  }
}
