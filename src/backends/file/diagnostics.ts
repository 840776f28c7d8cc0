/**
 * What the file backend tells people: `inspect` (one key, read only: it never creates a folder) and
 * `doctor` (the lock root: boot id, whether link() works, where the fences' epochs live, fsync).
 */
import { randomBytes } from 'node:crypto'
import { tmpdir } from 'node:os'
import { join, sep } from 'node:path'
import type { DoctorFinding, LockBackend, LockInfo } from '../../core/backend.js'
import { BOOT_FOLDER, currentEpoch, EPOCH_FOLDER, epochRefusal } from './epochs.js'
import { readCurrent } from './generations.js'
import { monotonicMs } from './host-clock.js'
import { isLive } from './records.js'
import { folderOf, type Root } from './root.js'

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
  return {
    held: true,
    owner: r.owner ?? '',
    ...(r.holder === undefined ? {} : { holder: r.holder }),
    fence: BigInt(r.fence),
    expiresInMs: r.deadline - monotonicMs(),
  }
}

/** Checks the lock root with `backend` (this root's backend, as the caller sees it: possibly wrapped). */
export async function fileDoctor(root: Root, backend: LockBackend): Promise<DoctorFinding[]> {
  const { dir, boot, durability } = root
  const findings: DoctorFinding[] = [{ level: 'info', message: `lock folder: ${dir}` }]
  findings.push(
    boot.startsWith('uptime:')
      ? {
          level: 'warn',
          message: 'no kernel boot id here; reboots are detected from the uptime (±2 min)',
        }
      : { level: 'ok', message: `boot id ${boot}` },
  )
  findings.push(...(await probeLink(backend)))
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

/** The key doctor takes and releases to see that exclusive create works. */
const PROBE_KEY = '.fencelock-doctor'

/** Takes and releases a probe key: exclusive create with link() works in this folder, or what failed. */
async function probeLink(backend: LockBackend): Promise<DoctorFinding[]> {
  // Released under the owner that took it: the release is owner-checked, and any other owner leaves the
  // probe held for its ttl.
  const owner = randomBytes(16).toString('hex')
  const probe = await backend
    .tryAcquire({ key: PROBE_KEY, owner, ttlMs: 1000 }, AbortSignal.timeout(5000))
    .catch((error: unknown) => (error instanceof Error ? error : new Error(String(error))))
  if (probe instanceof Error) return [{ level: 'error', message: probe.message }]
  if (!probe.granted) return []
  await backend.release(
    { key: PROBE_KEY, owner, fence: probe.fence, cookie: probe.cookie },
    AbortSignal.timeout(5000),
  )
  return [{ level: 'ok', message: 'exclusive create with link() works in this folder' }]
}
