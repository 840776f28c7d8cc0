/**
 * The mutex's acquire, one attempt at a time (the core waits and retries): on the state this process
 * wrote last (written.ts: one stat, no listing, no read) or on what a read of the folder finds, then the
 * link() of generation N+1 that only one writer wins.
 */
import type { AcquireRequest, AttemptResult } from '../../../core/backend.js'
import { nextBase } from '../epochs.js'
import { createFolder, rootMade } from '../folders.js'
import { type Current, collect, type Pending, pendingIn, type Stamp } from '../generations.js'
import { monotonicMs } from '../host-clock.js'
import { folderOf, grantFlush, type Root } from '../root.js'
import type { SweepTrigger } from '../sweep.js'
import {
  carriedBase,
  holderCheckable,
  holderGone,
  isLive,
  newRecord,
  type RecordV1,
  readCurrent,
} from './records.js'
import { WRITTEN, type Written, writtenId } from './written.js'

/**
 * How soon a waiter refused by a lease whose processes can be checked tries again: a holder's death
 * writes nothing that a watch could see. Each try is a listing and two small reads (the record, and
 * /proc/<pid>/stat): a few tens of microseconds.
 */
const HOLDER_CHECK_MS = 100

/** What an attempt found: someone's live lease, our own (a lost reply), or a state we may succeed. */
type Plan =
  | { readonly act: 'answer'; readonly result: AttemptResult }
  /** `base` undefined: start a fresh range (no generation, or an unreadable one). */
  | { readonly act: 'take'; readonly base: bigint | undefined }

/**
 * One attempt: take the key as generation N+1 when its state N is free or expired, answer "ours" when an
 * earlier attempt of this acquire won, or report how long the holder's lease has left. The state is what
 * this process wrote last in the folder, when it still stands (one stat), else what a read of the folder
 * finds. `signal`: the core stopped waiting for this attempt (its bound passed, or the caller aborted).
 */
export async function acquireOnce(
  root: Root,
  req: AcquireRequest,
  signal: AbortSignal,
  sweeper: SweepTrigger | undefined,
): Promise<AttemptResult> {
  const result = await attempt(root, req, signal)
  // A grant ends the wait; a refusal's reading stays for the wake-up hint (acquireRead notes it).
  if (result.granted) {
    root.seenBy.delete(req.owner)
    // A client that takes locks sweeps the root now and then: what nobody will release goes too.
    sweeper?.used()
  }
  return result
}

async function attempt(root: Root, req: AcquireRequest, signal: AbortSignal): Promise<AttemptResult> {
  const id = writtenId(root, req.key)
  const written = WRITTEN.get(id)
  const folder = written?.folder ?? folderOf(root, req.key)
  // The deadline counts from before we look: never later than the lease the core believes in.
  const start = monotonicMs()
  let pending: Pending | undefined
  try {
    // A live record goes the long way: the folder may hold a successor (a release by another process)
    // that this process never saw, and answering "held" from a stale record would wait for nothing.
    if (written && !isLive(written.record, root.boot)) {
      // Pin the folder, then check that our last write is still its state (name N, that very file): then
      // it is what a read would find, unless a successor N+1 exists, which our link of N+1 finds out.
      pending = pendingIn(folder)
      if (pending?.holds(written.gen, written.stamp)) {
        const next = plan(root, folder, { ...written, names: [] }, req.owner)
        if (next.act === 'take') {
          const granted = await take(root, req, folder, pending, written, next.base, start, signal)
          if (granted) return granted
          pending = undefined // Used up by its commit: the read below starts afresh.
        }
      }
      WRITTEN.forget(id)
    } else {
      // The root is made once per process, off the event loop, however many first acquires start at
      // once (folders.ts): a fresh root's key folders would otherwise each make it, synchronously.
      await rootMade(root.dir)
      // A key this process has not written in: its folder is made if missing (one call either way, and
      // no exception). A folder we have just made holds no generation: pin it, and take generation 1. (A
      // folder that cannot be made is a setting error, thrown as such: errors.ts.)
      if (createFolder(folder, root.shared) !== undefined) {
        pending = pendingIn(folder)
        // Whatever this acquire saw before was another folder: every generation of this one is news.
        root.seenBy.delete(req.owner)
        if (pending) {
          const granted = await take(root, req, folder, pending, undefined, undefined, start, signal)
          if (granted) return granted
          pending = undefined
        }
      }
    }
    return await acquireRead(root, req, folder, pending, start, signal)
  } finally {
    pending?.discard()
  }
}

/**
 * How many reads of the folder one attempt makes at most. A take that lost to another writer reads
 * again, to answer what the folder then holds: a lease and how long it has left (the winner's, or ours
 * when an earlier attempt of this acquire won), or a state it may succeed. A bare refusal would have the
 * core report the key held by another owner when nobody holds it.
 */
const READ_ROUNDS = 3

/** An attempt on the state a read of the folder finds; `pinned`, if any, pinned the folder before it. */
async function acquireRead(
  root: Root,
  req: AcquireRequest,
  folder: string,
  pinned: Pending | undefined,
  start: number,
  signal: AbortSignal,
): Promise<AttemptResult> {
  let pending = pinned
  // Bounded rounds, each after a lost race (another writer made progress), with no wait: not a retry.
  for (let round = 0; round < READ_ROUNDS && !signal.aborted; round++) {
    const result = await readAndTake(root, req, folder, pending, start, signal)
    if (result) return result
    pending = undefined // Used up, or never made: the next round pins afresh.
  }
  // Every round lost to a writer that got there first: the key is being taken by others.
  return { granted: false }
}

/**
 * One read of the folder and what follows from it: the answer, or undefined when another writer (or a
 * removal) got in between the read and our link. `pinned` is discarded before it returns.
 */
async function readAndTake(
  root: Root,
  req: AcquireRequest,
  folder: string,
  pinned: Pending | undefined,
  start: number,
  signal: AbortSignal,
): Promise<AttemptResult | undefined> {
  let pending = pinned
  try {
    let current = await readCurrent(folder)
    if (current.record === 'none' && !pending) {
      // No generation: a new key, or its folder or files were removed. (Re)create the folder; a folder
      // that cannot be made is a setting error, thrown as such (errors.ts).
      const made = current.missing && createFolder(folder, root.shared) !== undefined
      // Pin the folder first, then read it again: whatever we decide next is decided on the folder our
      // link will land in, and a new epoch is taken after every removal that preceded this read. A folder
      // we have just made needs no read: it was empty when made, and our pin followed.
      pending = pendingIn(folder)
      if (!pending) return undefined
      if (!made) {
        current = await readCurrent(folder)
        if (current.record === 'none' && current.missing) return undefined
      }
    }
    // What this acquire has seen: its wake-up hint ignores events on generations up to this one.
    root.seenBy.renew(req.owner, current.gen)
    const next = plan(root, folder, current, req.owner)
    if (next.act === 'answer') return next.result
    // The temp file pins the folder; commit() checks that it is the folder we read (generations.ts).
    pending ??= pendingIn(folder)
    // The folder vanished since our read: the next round recreates it.
    if (!pending) return undefined
    const read = current.record === 'none' ? undefined : current
    const taken = take(root, req, folder, pending, read, next.base, start, signal)
    pending = undefined // take's commit discards it.
    return await taken
  } finally {
    pending?.discard()
  }
}

/**
 * Creates generation N+1 holding the lease, after `state` (N; undefined for none, the folder pinned before
 * the read that found none): the grant, or undefined when another writer got there first. An attempt the
 * core stopped waiting for links nothing: its grant would only be given back (attempt.ts, `releaseLate`),
 * and meanwhile the next attempt of the same acquire would find the key taken.
 */
async function take(
  root: Root,
  { key, owner, ttlMs, holder, value }: AcquireRequest,
  folder: string,
  pending: Pending,
  state: { readonly gen: bigint; readonly stamp: Stamp } | undefined,
  carried: bigint | undefined,
  start: number,
  signal: AbortSignal,
): Promise<AttemptResult | undefined> {
  try {
    const gen = (state?.gen ?? 0n) + 1n
    const base = await nextBase(root, carried, gen, folder)
    // The core answers nothing more to this attempt once its signal aborted: a refusal it never reads.
    if (signal.aborted) return { granted: false }
    const fence = base + gen
    const deadline = start + ttlMs
    // No flush within a boot (unless the host has no boot id): see epochs.ts and `carriedBase`.
    const { processes } = root
    const record = newRecord(
      { key, state: 'held', owner, fence, base, deadline, holder, processes, value },
      root.boot,
    )
    const stamp = await pending.write(record, grantFlush(root))
    if (signal.aborted) return { granted: false }
    const names = await pending.commit(gen, grantFlush(root), state?.stamp)
    if (!names) return undefined
    collect(folder, gen, names)
    const cookie: Written = { folder, gen, record, stamp }
    WRITTEN.remember(writtenId(root, key), cookie)
    return { granted: true, fence, ttlMs, cookie }
  } finally {
    pending.discard()
  }
}

function plan(root: Root, folder: string, current: Current<RecordV1>, owner: string): Plan {
  if (current.record === 'none') return { act: 'take', base: undefined }
  if (current.record === 'unreadable') {
    const remaining = root.unreadable.remainingMs(folder, current.gen)
    if (remaining > 0) return { act: 'answer', result: { granted: false, retryInMs: remaining } }
    return { act: 'take', base: undefined }
  }
  const r = current.record
  if (!isLive(r, root.boot)) return { act: 'take', base: carriedBase(root, r) }
  if (r.owner === owner) {
    // An earlier attempt of this same acquire won and its reply was lost: it is ours.
    // Its lease is what is left of that attempt's deadline, not a fresh ttl.
    const cookie: Written = { folder, gen: current.gen, record: r, stamp: current.stamp }
    const ttlMs = r.deadline - monotonicMs()
    return { act: 'answer', result: { granted: true, fence: BigInt(r.fence), ttlMs, cookie } }
  }
  // Its processes all gone: nobody can renew or release it, and nothing it guarded runs. Taken over like an
  // expired lease, so the fence rules are the same (the successor's fence is the next one).
  if (holderGone(r, root.boot)) return { act: 'take', base: carriedBase(root, r) }
  const remaining = r.deadline - monotonicMs()
  const retryInMs = holderCheckable(r, root.boot) ? Math.min(remaining, HOLDER_CHECK_MS) : remaining
  return { act: 'answer', result: { granted: false, retryInMs } }
}
