/**
 * One lock root as this process sees it: its folder, its settings, this boot's id, and what this process
 * has observed of unreadable records. Every operation of the backend takes it.
 */
import { join } from 'node:path'
import { now } from '../../core/clock.js'
import type { EpochSource } from './epochs.js'
import { type Flush, keyFolderName } from './generations.js'

export interface Root extends EpochSource {
  /** The lock root, absolute. */
  readonly dir: string
  /** `file://<dir>`: names the store in errors. */
  readonly id: string
  /** This boot's id (host-clock.ts), written into every record. */
  readonly boot: string
  readonly unreadable: UnreadableRecords
}

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
