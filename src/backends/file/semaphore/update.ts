/**
 * Every change of a semaphore is one compare-and-swap of its whole record (../whole-record.ts): a grant
 * counts the permits of exactly the record it succeeds, so at most `limit` are held by live leases at any
 * moment, whoever writes at the same time, from any process of the host. Sequences are `base + generation`,
 * going on from a fresh epoch after a new or removed folder, so they only grow.
 */
import type { Root } from '../root.js'
import { type Change, type RecordKind, type Step, updateRecord, type Written } from '../whole-record.js'
import { liveView, readSemaphore, type SemaphoreRecord } from './records.js'

/** What a change writes: the record's own fields (the rest is filled in here). */
export type Draft = Pick<SemaphoreRecord, 'limit' | 'leases' | 'line'> & {
  readonly latest?: string | undefined
}

const SEMAPHORES: RecordKind<SemaphoreRecord, Draft> = {
  what: 'semaphore',
  read: readSemaphore,
  live: liveView,
  build: (draft, { key, boot, base }) => ({
    v: 1,
    kind: 'semaphore',
    key,
    limit: draft.limit,
    boot,
    base,
    ...(draft.latest === undefined ? {} : { latest: draft.latest }),
    leases: draft.leases,
    line: draft.line,
  }),
}

/** A decision on the semaphore's live record. */
export type { Step }

/** The generation a semaphore's change wrote. */
export type SemaphoreWritten = Written<SemaphoreRecord>

/** Applies `change` to the semaphore `key` in `folder`: its answer, and the generation written, if any. */
export const update = <T>(
  root: Root,
  key: string,
  folder: string,
  change: Change<T, SemaphoreRecord, Draft>,
): Promise<{ readonly answer: T; readonly written?: SemaphoreWritten }> =>
  updateRecord(SEMAPHORES, root, key, folder, change)
