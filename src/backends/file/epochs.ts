/**
 * The lock root's epoch counter: `<root>/.epoch/`, a generation store of its own whose highest name is the
 * latest epoch issued. An epoch is taken whenever a key folder must start a fence range afresh (a new or
 * removed folder, an unreadable record, a range used up): the range of epoch E is (E·2^21, (E+1)·2^21), so
 * every fence minted in it is above every fence of an earlier epoch. See docs/backends/file.md for the argument.
 *
 * Why epochs never go back, whatever of the root is lost: EPOCHS ARE USED ONLY IN THE PAST. A new epoch is
 * at least the wall clock in ms, and nobody mints a fence from epoch E until the wall clock has passed E:
 * a bump waits for it (`clockPast`; a millisecond in a steady state). So every epoch any fence came from is
 * below the wall clock of every later moment, and a bump that has lost everything else (`.epoch`, `.boot`,
 * the whole root: a root on tmpfs after a reboot, a tmp cleaner, an operator), or a process whose view of
 * `.epoch` is stale, still issues above them all by taking the clock. The listing, a process's cache and
 * the reservations below only ever push an epoch higher, never make it safe. (A bound like "epochs
 * follow the clock" is not enough: after a quick reboot a boot's epochs start where the previous boot's
 * reservation ended, ahead of the clock, and a loss before the clock catches up would issue them again.
 * Hence the wait, and reservations that end at most RESERVE ahead of the clock, so a quick reboot waits
 * at most that long.)
 * It fails only if the wall clock goes back: then the epochs lead it. A lead of up to MAX_LEAD_MS (a quick
 * reboot, a small step of the clock) is waited out; a longer one is refused (`EpochError`, saying what to
 * do), since whatever would be issued meanwhile is above the clock, where a loss would issue it again.
 *
 * The budget: epochs stay below EPOCH_LIMIT = 2^42 (ms of the wall clock: the year 2109), so fences, below
 * (E+1)·2^21, stay below 2^63 and fit a SQL `bigint`. An epoch at or past it is never issued: a clock set
 * beyond 2109 (an RTC reset) is refused, and so is a root pushed past it (`EpochError`).
 *
 * Durability, per boot (`durability: 'boot'`, the default where the kernel gives a boot id): epochs are
 * issued in the page cache, with no fsync, inside a RESERVATION that is on disk: `<root>/.boot/`, a store
 * whose highest name R is the latest reservation, its record `{ v: 1, boot, from }` saying "boot `boot`
 * issues epochs in [from, R)". Only a power loss or a kernel crash loses page-cache writes, and either one
 * is a reboot, which changes the boot id: the first bump of a new boot finds a reservation of another boot
 * and makes its own, from ≥ that R, fsynced (file and folder) before any epoch is issued from it. So every
 * epoch of the new boot exceeds every epoch the old one issued, whatever of them the disk kept. A boot
 * that runs past its R (RESERVE past the clock: about 4 s of it) reserves again, fsynced: reservations
 * are created like epochs (link() of a name above every name read, the check for a higher name after it),
 * so processes racing on a new boot agree on one, and R only grows. A reservation ends at most RESERVE
 * past the clock when it is made (or just past its start, where the start already leads by more), so a
 * new boot's first epoch leads the clock by at most about that. A bump that finds no epoch of this boot
 * in `.epoch` although the boot has reserved before (`.epoch` lost within the boot) goes past the end of
 * the boot's latest reservation, not to its start, which may have been issued already: an epoch issued
 * twice is no fence issued twice (neither was used before the clock passed it), but two processes that
 * each believe an epoch theirs would start the same key with it (`startAgain` checks the issuer).
 * `durability: 'acquire'` (no boot id on this host) fsyncs every new epoch instead; 'none' (fsync off)
 * fsyncs nothing.
 *
 * What a process keeps (per root, shared by its backends): the latest epoch it saw issued, where its next
 * bump starts without listing `.epoch` (`bumpOnce`); and the epoch it took last with the key folders it
 * started with it, which new keys reuse while nothing was issued since (`startAgain`), and the bump under
 * way that every new key of the process waits for rather than bumping too (`sharedStart`).
 */
import { randomBytes } from 'node:crypto'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { BoundedMap } from '../../core/bounded-map.js'
import { sleep } from '../../core/clock.js'
import { retryRounds } from '../../core/retry.js'
import { makeRootFolder } from './folders.js'
import { collect, createGeneration, type Flush, genName, highest } from './generations.js'

/** The epochs' folder in the lock root. Its name has no `~`, so no key folder can ever be called that. */
export const EPOCH_FOLDER = '.epoch'

/**
 * Fences per epoch. Epochs are ms of the wall clock (or a little above, see the header): 2^42 ms reach the
 * year 2109, and 2^42 epochs of 2^21 fences stay below 2^63, where a SQL `bigint` column holds them. A key
 * that makes 2^21 transitions in one range (a lock renewed every 10 s for eight months) simply takes a new
 * epoch.
 */
export const RANGE = 2n ** 21n

/** The budget: no epoch at or above it is issued (fences stay below 2^63; see the header). */
export const EPOCH_LIMIT = 2n ** 42n

/**
 * The longest an epoch may lead the wall clock and still be waited for, in ms: four reservations, what
 * a quick reboot (at most one) and a small step back of the clock add. A longer lead is refused.
 */
export const MAX_LEAD_MS = 16_384n

/**
 * An epoch this root cannot issue: past the budget (`retryable` false), or leading the wall clock by more
 * than MAX_LEAD_MS (`retryable`: the clock catches up). The message names the root, the epoch, the clock,
 * and what to do; errors.ts adds the key.
 */
export class EpochError extends Error {
  override name = 'EpochError'
  constructor(
    message: string,
    readonly retryable: boolean,
  ) {
    super(message)
  }
}

/**
 * Why the next new epoch of `root` would be refused now (past the budget, or far ahead of the clock), if
 * it would: for `doctor`.
 */
export function epochRefusal(root: string): string | undefined {
  return refusal(root, currentEpoch(root) + 1n, BigInt(Date.now()))?.message
}

/** An ms count of the wall clock as a date, for messages. */
const dateOf = (ms: bigint): string =>
  ms < 8_640_000_000_000_000n ? new Date(Number(ms)).toISOString() : `${ms} ms after 1970`

/** Why epoch `next` cannot be issued in `root` at wall clock `wall`, if it cannot. */
function refusal(root: string, next: bigint, wall: bigint): EpochError | undefined {
  const reset =
    `If the clock is right now, remove ${join(root, EPOCH_FOLDER)} and ${join(root, BOOT_FOLDER)} (with no lock held): ` +
    'epochs restart at the clock, so fences restart lower: reset the fences your resources keep too'
  if (wall >= EPOCH_LIMIT) {
    return new EpochError(
      `this host's wall clock reads ${dateOf(wall)}, past the fence epoch budget (2^42 ms, the year 2109): ` +
        'fences would overflow 2^63 (a SQL bigint). Set the clock right',
      false,
    )
  }
  if (next >= EPOCH_LIMIT) {
    return new EpochError(
      `the fence epochs of ${root} reached ${next}, past their budget (2^42, the year 2109 in ms): a process ` +
        `with a clock in the future took them there, and fences would overflow 2^63 (a SQL bigint). ${reset}`,
      false,
    )
  }
  if (next - wall > MAX_LEAD_MS) {
    return new EpochError(
      `the fence epochs of ${root} (${next}: ${dateOf(next)}) lead this host's wall clock (${dateOf(wall)}) by ` +
        `${(next - wall) / 1000n} s: the clock was set back, or a process with a clock in the future took them. ` +
        `New fence ranges resume once the clock passes ${dateOf(next - MAX_LEAD_MS)}. ${reset}`,
      true,
    )
  }
  return undefined
}

/** How many rounds one bump makes (each lost to another bumper, or to a removed folder) before it gives up. */
const BUMP_TRIES = 50

/** The epoch whose range holds `fence`. */
export const epochOf = (fence: bigint): bigint => fence / RANGE

/** The base that makes generation `gen` the first fence of epoch `epoch`'s range: epoch·2^21 + 1. */
export const baseFor = (epoch: bigint, gen: bigint): bigint => epoch * RANGE + 1n - gen

/**
 * How a root's writes survive a power loss. 'boot': what a new boot needs, once per boot (see the header);
 * 'acquire': every grant and epoch, where the host has no boot id to tell boots apart; 'none': nothing.
 */
export type Durability = 'boot' | 'acquire' | 'none'

/** Where epochs come from: the lock root and how it flushes. `Root` (root.ts) is one. */
export interface EpochSource {
  readonly dir: string
  readonly durability: Durability
  /** The root is shared by several users (folders.ts): the folders made in it are shared too. */
  readonly shared?: boolean | undefined
  /** This boot's id, written into reservations (and records). */
  readonly boot: string
  readonly flush: Flush
  /**
   * This process's copy of its boot's latest reservation, when it has seen one: on disk reservations only
   * grow, so an epoch below this `below` is covered without reading `.boot` again.
   */
  reserved?: { readonly from: bigint; readonly below: bigint } | undefined
  /** The wall clock in ms (tests set it). */
  readonly clock?: (() => number) | undefined
  /** How a bump waits for the wall clock (tests set it with `clock`, to run a clock of their own). */
  readonly sleep?: ((ms: number) => Promise<void>) | undefined
  /** The latest epoch this process saw issued in this root, if any (`seenEpochs`): where a bump starts. */
  readonly seen?: SeenEpoch | undefined
  /** The epoch this process last took here and the folders it started with it (`startsOf`). */
  readonly starts?: EpochStarts | undefined
}

/**
 * The latest epoch a process saw issued (or claimed) in a root: where its next bump starts, never trusted
 * alone (see `bumpOnce`). `list`: the folder must be listed first, since another process may be ahead.
 */
export interface SeenEpoch {
  latest: bigint
  list: boolean
}

/**
 * Per root; bounded (a process with many roots forgets the oldest: a backend keeps the object it was
 * given, and a later one on that root starts afresh, which costs a listing).
 */
const SEEN = new BoundedMap<string, SeenEpoch>(64)

/**
 * The epoch this process last saw issued in the root `dir`, shared by its backends on that root, so that
 * a bump starts from it instead of listing `.epoch` first (see `bumpOnce`).
 */
export function seenEpochs(dir: string): SeenEpoch {
  let seen = SEEN.get(dir)
  if (!seen) {
    seen = { latest: 0n, list: true }
    SEEN.set(dir, seen)
  }
  return seen
}

/** The reservations' folder in the lock root (no `~`: no key folder is called that). */
export const BOOT_FOLDER = '.boot'

/**
 * How far past the wall clock a reservation reaches: 2^12 ms, about 4 s (epochs follow the clock), so a
 * root that takes new epochs all the time fsyncs about every 4 s, and a boot that starts right after the
 * previous one's reservation waits at most that long for its first fence range (see the header).
 */
export const RESERVE = 2n ** 12n

/** The latest epoch issued in `root`, 0 when none (a new root, or one whose `.epoch` was removed). */
export function currentEpoch(root: string): bigint {
  try {
    return highest(readdirSync(join(root, EPOCH_FOLDER)))
  } catch {
    return 0n
  }
}

/**
 * Issues a new epoch: one greater than every epoch issued before in this root, and than `floor`, and at
 * least the wall clock in ms (see the header for why). Several processes may bump at once: each links
 * the name `latest + 1` (a compare-and-swap, as for generations); the loser of a race re-reads and tries
 * the next name. Per `durability`, a power loss must never let the same epoch be issued twice: with
 * 'acquire' the name is fsynced; with 'boot' it is covered by a reservation of this boot, fsynced.
 */
export async function bumpEpoch(source: EpochSource, floor: bigint): Promise<bigint> {
  return (await issueEpoch(source, floor)).epoch
}

/** `bumpEpoch`, with the issuer's mark written in the epoch's record (`startAgain` checks it). */
async function issueEpoch(source: EpochSource, floor: bigint): Promise<Issued> {
  const folder = join(source.dir, EPOCH_FOLDER)
  const issued = await retryRounds(
    BUMP_TRIES,
    () => bumpOnce(source, folder, floor),
    () =>
      new Error(
        `could not take a new fence epoch in ${folder} after ${BUMP_TRIES} tries: too many processes at once`,
      ),
  )
  await clockPast(source, issued.epoch)
  return issued
}

/** An epoch issued, and the mark its record carries (drawn afresh by each bump). */
interface Issued {
  readonly epoch: bigint
  readonly by: string
}

/** The wall clock in ms (a test's, if it set one). */
const wallOf = (source: EpochSource): bigint => BigInt(Math.floor((source.clock ?? Date.now)()))

/**
 * Returns once the wall clock has passed `epoch`: no fence is minted from an epoch before (the header's
 * argument). A loop with a timer, in this folder on purpose: the wait is part of the fence argument, not a
 * retry, and the clock decides when it ends (a timer and the wall clock are different clocks).
 */
async function clockPast(source: EpochSource, epoch: bigint): Promise<void> {
  for (let wall = wallOf(source); wall <= epoch; wall = wallOf(source)) {
    const refused = refusal(source.dir, epoch, wall)
    if (refused) throw refused
    await (source.sleep ?? sleep)(Number(epoch - wall) + 1)
  }
}

/**
 * One round of `bumpEpoch`: the epoch issued, or undefined when another bumper took the name first.
 * Where this process saw an epoch issued before (`seen`), the round starts from it without listing
 * `.epoch`: the listing only ever chose the name to try. What makes the name a new epoch is the link
 * (exclusive) and the check after it that no higher name exists: the highest name is never collected, so
 * any epoch issued before, by anyone, leaves a name at or above it, and a guess that is behind fails that
 * check (or the link) and the next round lists the folder.
 */
async function bumpOnce(source: EpochSource, folder: string, floor: bigint): Promise<Issued | undefined> {
  const flush = source.durability === 'acquire' ? source.flush : undefined
  const seen = source.seen ?? { latest: 0n, list: true }
  let latest = seen.latest
  if (seen.list) {
    let names: string[]
    try {
      names = readdirSync(folder)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
      await makeFolder(source, folder, flush)
      return undefined
    }
    const listed = highest(names)
    if (listed > latest) latest = listed
  }
  const wall = wallOf(source)
  let next = [latest, floor, wall - 1n].reduce((a, b) => (a > b ? a : b)) + 1n
  // Before anything is written: a clock or a root past the budget, or epochs far ahead of the clock.
  const refused = refusal(source.dir, next, wall)
  if (refused) throw refused
  if (source.durability === 'boot') {
    // Covered first, issued after: the reservation is on disk before this epoch exists anywhere.
    let reserved = await reserve(source, next, wall)
    if (!reserved) return undefined
    if (next < reserved.from) {
      // Below this boot's first epoch: the listing shows no epoch of this boot. Either this is the
      // boot's first bump, and the reservation this very call made starts above everything the old
      // boots reserved, which may be above the `.epoch` names the disk kept (the old boot's last ones
      // lived in the page cache, and may be gone): `from` was issued by nobody yet. Or `.epoch` lost
      // what this boot issued (a cleaner, an operator): `from` and more may have been issued, to
      // processes that may still be waiting for the clock to pass them (a boot that started within
      // RESERVE of the previous one's reservation leads the clock). Then go above every epoch this boot
      // can have issued, so no epoch is issued twice: the end of its latest reservation on disk,
      // reserved anew. One reservation more per such loss.
      if (!reserved.first) {
        const end = await reservedEnd(source)
        if (end === undefined) return undefined
        next = end
        reserved = await reserve(source, next, wall)
        if (!reserved) return undefined
      } else next = reserved.from
    }
    // Another bump of this process may have claimed names while this one awaited: go above them.
    if (next <= seen.latest) next = seen.latest + 1n
  }
  // The reservation may have moved it: the same checks, before the epoch exists anywhere.
  const ahead = refusal(source.dir, next, wall)
  if (ahead) throw ahead
  // Claimed before the next await: another bump of this process, running meanwhile, tries the name above
  // instead of racing this one for the same name. (A claim that fails only leaves a gap.)
  seen.latest = next
  const by = randomBytes(8).toString('hex')
  let names: string[] | false
  try {
    // Exclusive: link() of name `next` succeeds for one bumper only, and the check after it (no higher
    // name) refuses a name that was issued, superseded and collected before (ABA). The highest name is
    // never collected, so an issued epoch is never issued again.
    names = await createGeneration(folder, next, { epoch: next.toString(), by }, flush)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    names = false // The folder went away: the next round lists it (and makes it again).
  }
  // Lost: another process is ahead of what this one saw; the next round lists the folder.
  seen.list = !names
  if (!names) return undefined
  // Where a later bump of this process claimed a name meanwhile, its collection (or the next one) takes
  // ours: bumps running side by side would otherwise each delete the same names.
  if (seen.latest === next) collect(folder, next, names)
  return { epoch: next, by }
}

/**
 * A reservation of this boot that covers `next` (from ≤ below, next < below), on disk; undefined when
 * another process reserved first (the caller's round starts over and finds theirs).
 */
async function reserve(source: EpochSource, next: bigint, wall: bigint): Promise<Reservation | undefined> {
  const cached = source.reserved
  if (cached && next < cached.below) return { ...cached, first: false }
  const read = await latestReservation(source)
  if (!read) return undefined
  const { folder, latest, record } = read
  const ours = record?.boot === source.boot
  if (ours && next < latest) {
    // Another process of this boot reserved far enough.
    source.reserved = { from: record.from, below: latest }
    return { ...source.reserved, first: false }
  }
  // Ours: keep its start. Another boot's (or unreadable, or none): start at its end, above every epoch
  // that boot may have issued, durable or not.
  const from = ours ? record.from : latest
  const start = next > from ? next : from
  // RESERVE past the clock, not past the start: a start that leads the clock (a quick reboot) does not
  // carry its lead on to the next boot's start.
  const below = start + 1n > wall + RESERVE ? start + 1n : wall + RESERVE
  let created: string[] | false
  try {
    // Durable: the record, then its name (an fsync of the folder), before any epoch is issued from it.
    created = await createGeneration(
      folder,
      below,
      { v: 1, boot: source.boot, from: from.toString() },
      source.flush,
    )
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    return undefined
  }
  if (!created) return undefined
  collect(folder, below, created)
  source.reserved = { from, below }
  return { from, below, first: !ours }
}

/**
 * A reservation: this boot issues epochs in [from, below). `first`: made by this call as the boot's first
 * (the latest before it was another boot's), so no epoch of this boot was issued from it yet.
 */
interface Reservation {
  readonly from: bigint
  readonly below: bigint
  readonly first: boolean
}

/**
 * The end of this boot's latest reservation on disk (its name): every epoch any process of this boot
 * issued lies below it. Undefined when `.boot` changed under the read (the caller's round starts over).
 */
async function reservedEnd(source: EpochSource): Promise<bigint | undefined> {
  const read = await latestReservation(source)
  if (!read) return undefined
  const { latest, record } = read
  // Not this boot's (`.boot` lost too, or replaced): nothing on disk bounds what this boot issued; the
  // wall clock is then the only floor left (see the header).
  if (record?.boot !== source.boot) return source.reserved?.below
  return latest
}

/**
 * The latest reservation in `.boot` (its name, and its record: undefined when unreadable or none);
 * undefined when the read must start over (the folder was just made, or the record was collected under
 * us by a newer reservation).
 */
async function latestReservation(
  source: EpochSource,
): Promise<
  { folder: string; latest: bigint; record: { boot: string; from: bigint } | undefined } | undefined
> {
  const folder = join(source.dir, BOOT_FOLDER)
  let names: string[]
  try {
    names = readdirSync(folder)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
    await makeFolder(source, folder, source.flush)
    return undefined
  }
  const latest = highest(names)
  const record = latest === 0n ? undefined : readReservation(join(folder, genName(latest)))
  if (record === 'gone') return undefined
  return { folder, latest, record }
}

/** A reservation's record: its boot and start; undefined when unreadable, 'gone' when its name vanished. */
function readReservation(path: string): { boot: string; from: bigint } | undefined | 'gone' {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'gone'
    throw error
  }
  try {
    const r = JSON.parse(text) as { v?: unknown; boot?: unknown; from?: unknown }
    if (r.v === 1 && typeof r.boot === 'string' && typeof r.from === 'string' && /^\d{1,20}$/.test(r.from))
      return { boot: r.boot, from: BigInt(r.from) }
  } catch {}
  return undefined
}

/**
 * The base for generation `gen` succeeding a state of base `base`: the same one (fences go on from it),
 * or a fresh range's when there is none to go on from or the range is used up. A fresh range is only ever
 * started after the read that found the state (the folder `folder` pinned before it, see index.ts), so
 * its epoch exceeds every epoch of every fence minted before for the key: either a new epoch, or the
 * epoch this process last took (`starts`), when nothing was issued since (`.epoch` still ends with it)
 * and no folder of this key was started with it before.
 * The caller passes no base for a state written in another boot (see index.ts): its fences may have
 * gone on, in that boot's page cache, past what the disk kept.
 */
export async function nextBase(
  source: EpochSource,
  base: bigint | undefined,
  gen: bigint,
  folder: string,
): Promise<bigint> {
  if (base !== undefined && (base + gen) % RANGE !== 0n) return base
  const starts = source.starts
  if (base === undefined && starts) {
    const shared = await sharedStart(source, starts, folder)
    if (shared !== undefined) return baseFor(shared, gen)
  }
  const floor = base === undefined ? 0n : epochOf(base + gen - 1n)
  const { epoch, by } = await issueEpoch(source, floor)
  // A range used up starts its new epoch too; either way no other folder of the key may start with it.
  if (starts) adopt(starts, epoch, by)
  starts?.folders.add(folder)
  return baseFor(epoch, gen)
}

/** Makes `epoch` the one this process starts new folders with (`startAgain`), if it is not already. */
function adopt(starts: EpochStarts, epoch: bigint, by: string): void {
  // (An epoch below the last one means `.epoch` was lost: that one is never used again either.)
  if (epoch === starts.epoch) return
  starts.epoch = epoch
  starts.by = by
  starts.folders.clear()
}

/**
 * How many bumps a fresh start of this process waits for, each shared with every other fresh start
 * meanwhile, before it takes an epoch of its own: more only when other processes keep issuing epochs
 * between a shared bump and its use (each is one more round of `startAgain`).
 */
const SHARED_BUMPS = 2

/**
 * The epoch for a fresh range in `folder`, shared: the one this process took last (`startAgain`), or one
 * bump that every fresh start of this process waiting meanwhile shares (`starts.bump`). So the first use
 * of a root by many new keys at once costs one epoch and, on a new boot, one reservation (its fsyncs),
 * not one each: 64 racing writers of the same reservation, each fsyncing its own copy first, took
 * seconds on a loaded disk. Safe as `startAgain` is: the bump may have begun before this folder was
 * pinned, but its epoch is used only if, listed after the pin (and after the bump), it is still the
 * latest issued. Undefined when no shared epoch will do (other processes kept issuing): the caller takes
 * its own, as before.
 */
async function sharedStart(
  source: EpochSource,
  starts: EpochStarts,
  folder: string,
): Promise<bigint | undefined> {
  let again: bigint | undefined
  for (let bumps = 0; again === undefined && bumps <= SHARED_BUMPS; bumps++) {
    if (bumps > 0) starts.bump ??= sharedBump(source, starts)
    // A bump under way may have begun before this folder's pin: wait for it, then check after the pin.
    if (starts.bump) await starts.bump
    again = startAgain(source, starts, folder)
  }
  return again
}

/**
 * One bump on behalf of every fresh start of this process (`sharedStart`), adopted for `startAgain`. A
 * failure (a setting, an epoch refused) reaches each of them, and the next fresh start tries again.
 */
function sharedBump(source: EpochSource, starts: EpochStarts): Promise<void> {
  const bump = issueEpoch(source, 0n).then(
    ({ epoch, by }) => {
      starts.bump = undefined
      adopt(starts, epoch, by)
    },
    (error: unknown) => {
      starts.bump = undefined
      throw error
    },
  )
  // Every caller awaits it; this handler only keeps a bump whose callers all gave up from going unhandled.
  bump.catch(() => {})
  return bump
}

/**
 * How many folders one epoch starts at most, before the next fresh start takes a new one: bounds the set
 * this process keeps of them (and costs one bump per this many new keys).
 */
const STARTS_PER_EPOCH = 4096
/**
 * The epoch this process last took, for a fresh range in `folder`, or undefined when it will not do. Its
 * fences must exceed every fence minted before for this key, in this folder or an earlier one at its
 * path. Every fence is minted in the range of an epoch issued in this root, and the highest `.epoch` name
 * is never collected: so when the listing still ends with `starts.epoch`, after the pin, no epoch above
 * it was ever issued, and every earlier fence of the key lies in a range of an epoch at most this one.
 * Equal is excluded by the set and the issuer's mark: the highest name must be the very record this
 * process's bump wrote (an epoch issued again after `.epoch` was lost is another process's), so only this
 * process ever started folders with it, and `starts.folders` names each (a path started with it, then
 * removed and made again, takes a new epoch). Per root, boot and durability (`startsOf`): an epoch of
 * another boot is below what this boot must issue, and one taken without a reservation is not covered.
 * Its age does not matter: it was first used once the clock had passed it, so a bump after any loss
 * still issues above it (see the header).
 */
function startAgain(source: EpochSource, starts: EpochStarts, folder: string): bigint | undefined {
  const { epoch, folders } = starts
  if (epoch === undefined || folders.size >= STARTS_PER_EPOCH || folders.has(folder)) return undefined
  if (currentEpoch(source.dir) !== epoch || issuerOf(source.dir, epoch) !== starts.by) return undefined
  folders.add(folder)
  return epoch
}

/** The mark in the record of epoch `epoch` (the bump that issued it), undefined when unreadable or gone. */
function issuerOf(dir: string, epoch: bigint): string | undefined {
  try {
    const record = JSON.parse(readFileSync(join(dir, EPOCH_FOLDER, genName(epoch)), 'utf8')) as {
      by?: unknown
    }
    return typeof record.by === 'string' ? record.by : undefined
  } catch {
    return undefined
  }
}

/** The epoch this process last took in a root, and the key folders it started a fresh range in with it. */
export interface EpochStarts {
  epoch: bigint | undefined
  /** The mark the bump of `epoch` wrote in its record. */
  by?: string | undefined
  readonly folders: Set<string>
  /** The bump under way that fresh starts share (`sharedStart`); it adopts its epoch when done. */
  bump?: Promise<void> | undefined
}

/**
 * Bounded like SEEN. Forgetting one is safe: an epoch is issued to one bump, and only the object of that
 * bump's backend adopts it, so two objects never start folders with the same epoch.
 */
const STARTS = new BoundedMap<string, EpochStarts>(64)

/** The epoch starts of this process in root `dir`, for boot `boot` and `durability` (see `startAgain`). */
export function startsOf(dir: string, boot: string, durability: Durability): EpochStarts {
  const id = `${durability} ${boot} ${dir}`
  let starts = STARTS.get(id)
  if (!starts) {
    starts = { epoch: undefined, folders: new Set() }
    STARTS.set(id, starts)
  }
  return starts
}

/**
 * Creates a folder of the root (shared in a shared root: folders.ts); with `flush`, its name in the root
 * is on disk too (else a power loss could drop it).
 */
async function makeFolder(source: EpochSource, folder: string, flush: Flush | undefined): Promise<void> {
  await makeRootFolder(folder, source.shared === true)
  if (flush) await flush.path(source.dir)
}
