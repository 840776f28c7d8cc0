/**
 * What the file backend tells people: `inspect` (one key, read only: it never creates a folder), `list`
 * (every key folder's current record, read only) and
 * `doctor` (the lock root: boot id, whether link() works, where the fences' epochs live, fsync, how many
 * keys it keeps and how many are held). Doctor creates nothing: a missing root is reported with the command that makes it, and
 * its one write, the link() probe, is two files of its own in the root, removed at once.
 */
import { randomBytes } from 'node:crypto'
import { linkSync, statSync, unlinkSync, writeFileSync } from 'node:fs'
import { opendir } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, sep } from 'node:path'
import type { DoctorFinding, ListedLock, LockInfo } from '../../core/backend.js'
import { BOOT_FOLDER, currentEpoch, EPOCH_FOLDER, epochRefusal } from './epochs.js'
import { readCurrent } from './generations.js'
import { monotonicMs } from './host-clock.js'
import { holderGone, isLive, type RecordV1 } from './records.js'
import { folderOf, type Root } from './root.js'
import { DEFAULT_SWEEP_AFTER_MS, stateOf } from './sweep.js'

/** Who holds `key`, as its folder says now. */
export async function inspectKey(root: Root, key: string): Promise<LockInfo> {
  // Read only: inspecting never creates a folder.
  const folder = folderOf(root, key)
  const current = await readCurrent(folder)
  if (current.record === 'none') {
    return {
      held: false,
      note:
        `no record in ${folder}${current.missing ? ' (no folder)' : ''}: the next grant takes a new epoch ` +
        `from ${join(root.dir, EPOCH_FOLDER)}, so its fence exceeds every fence granted before for this key; ` +
        'removing the whole lock root (or its .epoch folder) restarts epochs at the wall clock in ms, ' +
        'still above them unless the clock went back',
    }
  }
  if (current.record === 'unreadable') {
    return {
      held: true,
      note:
        `generation ${current.gen} in ${folder} is unreadable (corrupt, or written by a newer fencelock); it ` +
        `counts as held until it has been seen unchanged for ${root.unreadable.holdMs} ms`,
    }
  }
  const r = current.record
  if (!isLive(r, root.boot)) return { held: false, fence: BigInt(r.fence) }
  if (holderGone(r, root.boot)) {
    const pids = r.processes?.marks.map((m) => m.pid).join(', ')
    return {
      held: false,
      fence: BigInt(r.fence),
      note: `its holder's processes (pid ${pids}) have exited: the lease is over, the next acquire takes it`,
    }
  }
  return heldView(r)
}

/** `inspect`'s view of a live record. */
function heldView(r: RecordV1): LockInfo {
  return {
    held: true,
    owner: r.owner ?? '',
    ...(r.holder === undefined ? {} : { holder: r.holder }),
    fence: BigInt(r.fence),
    expiresInMs: r.deadline - monotonicMs(),
  }
}

/**
 * The live leases of keys starting with `prefix`: one read of each key folder's current record (the
 * record holds its key; the folder's name is a hash). An unreadable record names no key, so it is left
 * out; `inspect` of its key says how it counts.
 */
export async function* listHeld(root: Root, prefix: string): AsyncGenerator<ListedLock> {
  const listing = await opendir(root.dir).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined // No root yet: no locks.
    throw error
  })
  if (!listing) return
  // Key folders are the only entries with a `~` in their name (`.epoch`, `.boot`, temp names have none).
  for await (const entry of listing) {
    if (!entry.name.includes('~') || !entry.isDirectory()) continue
    const current = await readCurrent(join(root.dir, entry.name))
    if (current.record === 'none' || current.record === 'unreadable') continue
    const r = current.record
    if (r.key.startsWith(prefix) && isLive(r, root.boot) && !holderGone(r, root.boot)) {
      yield { key: r.key, ...heldView(r) }
    }
  }
}

/** Checks the lock root, changing nothing in it but the link() probe's own files. */
export async function fileDoctor(root: Root): Promise<DoctorFinding[]> {
  const { dir, boot, durability } = root
  const found = statSync(dir, { throwIfNoEntry: false })
  if (found === undefined) {
    return [
      {
        level: 'warn',
        message:
          `the lock folder ${dir} does not exist, so no lock is held in it (doctor creates nothing; the ` +
          `first acquire creates it). To create it now: mkdir -p '${dir}' (for a folder every user of ` +
          `this host shares, as fencelock run's default: install -d -m 1777 '${dir}'); then run doctor again ` +
          'to check it',
      },
    ]
  }
  if (!found.isDirectory()) return [{ level: 'error', message: `the lock folder ${dir} is not a folder` }]
  const findings: DoctorFinding[] = [{ level: 'info', message: `lock folder: ${dir}` }]
  findings.push(
    boot.startsWith('uptime:')
      ? {
          level: 'warn',
          message: 'no kernel boot id here; reboots are detected from the uptime (±2 min)',
        }
      : { level: 'ok', message: `boot id ${boot}` },
  )
  findings.push(probeLink(dir))
  findings.push(await countKeys(root))
  const epochs = join(dir, EPOCH_FOLDER)
  const temporary = ['/tmp', '/var/tmp', '/dev/shm', tmpdir()].some(
    (t) => dir === t || dir.startsWith(t.endsWith(sep) ? t : `${t}${sep}`),
  )
  findings.push({
    level: temporary ? 'warn' : 'info',
    message:
      `fences: epoch ${currentEpoch(dir)} in ${epochs}. Removing a key's folder never lowers its fence; ` +
      'removing the whole lock root (or its .epoch folder) restarts epochs at the wall clock in ms, which ' +
      'keeps fences rising unless the clock goes back. ' +
      (temporary
        ? `This root is in a temporary folder: better make its tmp cleaner (systemd-tmpfiles, tmpreaper) skip ${epochs} and ${join(dir, BOOT_FOLDER)}`
        : `Keep tmp cleaners away from ${epochs} and ${join(dir, BOOT_FOLDER)}`),
  })
  const refused = epochRefusal(dir)
  if (refused) findings.push({ level: 'error', message: `new fence ranges are refused: ${refused}` })
  findings.push(
    durability === 'boot'
      ? { level: 'ok', message: 'fences survive a power loss: fsync once per boot (and per new reservation)' }
      : durability === 'acquire'
        ? { level: 'ok', message: 'fences survive a power loss: fsync on every acquire (no boot id here)' }
        : { level: 'warn', message: 'fsync is off: a power loss may reissue a fence' },
  )
  return findings
}

/**
 * Whether link() refuses an existing name in `dir`, the compare-and-swap every transition rests on (some
 * network and FUSE file systems have no hard links, or answer differently). Only a write shows it: two
 * files of doctor's own (random names that no key folder has), removed before it answers.
 */
function probeLink(dir: string): DoctorFinding {
  const file = join(dir, `.doctor-${randomBytes(8).toString('hex')}`)
  const probe = `(probe: doctor wrote and removed ${file} and a link to it)`
  const made: string[] = []
  try {
    writeFileSync(file, '', { flag: 'wx' })
    made.push(file)
    linkSync(file, `${file}.link`)
    made.push(`${file}.link`)
    try {
      linkSync(file, `${file}.link`)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') {
        return { level: 'ok', message: `exclusive create with link() works in this folder ${probe}` }
      }
      throw error
    }
    return { level: 'error', message: `link() replaced an existing name in this folder ${probe}` }
  } catch (error) {
    return { level: 'error', message: `cannot check link() in this folder: ${(error as Error).message}` }
  } finally {
    for (const path of made) {
      try {
        unlinkSync(path)
      } catch {}
    }
  }
}

/** How many key folders doctor counts at most: a listing of the root and a read of each, bounded. */
const COUNT_LIMIT = 100_000

/**
 * How many keys the root keeps a folder for, and how many of them are held: the others are in use lately,
 * or ended and waiting for a live client's sweep (sweep.ts) or `fencelock prune`.
 */
async function countKeys(root: Root): Promise<DoctorFinding> {
  const listing = await opendir(root.dir)
  let keys = 0
  let held = 0
  let ended = 0
  // Key folders are the only entries with a `~` in their name (`.epoch`, `.boot`, temp names have none).
  for await (const entry of listing) {
    if (!entry.name.includes('~') || !entry.isDirectory()) continue
    const state = stateOf(root, await readCurrent(join(root.dir, entry.name)))
    keys++
    if (state.kind === 'held') held++
    else if (state.kind === 'ended' && state.endedMs >= DEFAULT_SWEEP_AFTER_MS) ended++
    if (keys >= COUNT_LIMIT) break
  }
  const at = (n: number) => (keys < COUNT_LIMIT ? `${n}` : `at least ${n}`)
  return {
    level: 'info',
    message:
      `lock names kept: ${at(keys)} (key folders in ${root.dir}), ${held} of them held` +
      (ended > 0
        ? `; ${ended} ended over a minute ago (a live client's sweep removes them, or \`fencelock prune\` now)`
        : ''),
  }
}
