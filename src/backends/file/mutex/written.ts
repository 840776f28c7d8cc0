/**
 * What this process wrote last in each key folder of the mutex: an acquire of a key this process released
 * (or saw expire) succeeds it without listing the folder or reading the record (the hot path).
 */
import { BoundedMap } from '../../../core/bounded-map.js'
import type { Stamp } from '../generations.js'
import { KEY_FOLDERS_REMEMBERED, type Root } from '../root.js'
import type { RecordV1 } from './records.js'

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
 * How many key folders this process remembers its last write in: entries of a few hundred bytes (more for
 * long keys or holder descriptions). A forgotten or stale entry costs one listing and one read: what every
 * acquire paid before.
 */
const WRITTEN_LIMIT = KEY_FOLDERS_REMEMBERED

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
