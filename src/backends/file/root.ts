/**
 * One lock root as this process sees it: its folder, its settings, this boot's id, and what this process
 * has observed of unreadable records and waiters' reads. Every operation of every primitive takes it.
 */
import { join } from 'node:path'
import type { BoundedMap } from '../../core/bounded-map.js'
import { now } from '../../core/clock.js'
import type { EpochSource } from './epochs.js'
import { type Flush, keyFolderName } from './generations.js'
import type { HolderProcesses } from './holders.js'

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
 * How many key folders a table of this process remembers something of (the mutex's last writes,
 * mutex/written.ts; the releases retire.ts waits to remove): the oldest is forgotten first.
 */
export const KEY_FOLDERS_REMEMBERED = 16_384

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
