/**
 * `fencelock doctor` for the adapters of the `cas-lease` engine: proves, on a probe record of its own, that
 * the store enforces the two conditions the engine's safety rests on. Some S3-compatible servers accept
 * `If-None-Match` / `If-Match` and silently ignore them: on such a store every waiter "creates" the lock at
 * once and two holders coexist, so a store that ignores either condition is an `error` finding.
 */
import { randomUUID } from 'node:crypto'
import type { DoctorFinding } from '../../core/backend.js'
import type { CasAdapter } from './adapter.js'
import type { ServerClock } from './fence.js'

/** What a probe needs to know beyond the adapter: where, and what to call things in its findings. */
export interface CasProbe {
  /** The probe record's lock key: a fresh one per run, so the first create meets no record. */
  readonly key: string
  /** Names the server in findings (its `Server` header, or its endpoint). */
  readonly server: string
  /** The store's names of the two conditions, e.g. `If-None-Match: *` and `If-Match`. */
  readonly createCondition: string
  readonly replaceCondition: string
}

/** A probe key no lock of a user's is likely to have, fresh per run. */
export const probeKey = (): string => `.fencelock-doctor/${randomUUID()}`

type Writes = Pick<CasAdapter, 'id' | 'read' | 'create' | 'replace'>

/**
 * A read of the (absent) probe record, for the server's clock, then four writes on it: create (must
 * succeed), create again (must be refused), replace on the first version (must succeed), replace on that
 * now stale version again (must be refused). Every body is distinct, so stores whose versions are content
 * hashes (S3 ETags) still get a new version each time.
 */
export async function probeConditionalWrites(
  adapter: Writes,
  probe: CasProbe,
  signal: AbortSignal,
): Promise<DoctorFinding[]> {
  const body = (step: string) => JSON.stringify({ doctor: step, nonce: randomUUID() })
  const at = `${adapter.id} (server: ${probe.server})`
  // The clock a grant's fence is made from: the one a read shows (fence.ts).
  const clock: ServerClock = {}
  await adapter.read(probe.key, signal, clock)
  const first = await adapter.create(probe.key, body('create'), signal)
  if (!first.ok) {
    return [
      {
        level: 'error',
        message: `${at} refused to create a new probe object: conditional writes are unusable`,
      },
    ]
  }
  const findings: DoctorFinding[] = []
  const second = await adapter.create(probe.key, body('create again'), signal)
  if (second.ok) {
    findings.push({
      level: 'error',
      message:
        `${at} ignores ${probe.createCondition}: a second create of an existing probe object was accepted. ` +
        'Two clients could both acquire one lock; do not use this store with fencelock',
    })
  }
  // Lax stores accepted the second create, so the version `first` returned may be stale already; a
  // refusal here is then the correct answer, and the stale replace below still tells the truth.
  const next = await adapter.replace(probe.key, body('replace'), first.version, signal)
  const stale = await adapter.replace(probe.key, body('replace stale'), first.version, signal)
  if (stale.ok) {
    findings.push({
      level: 'error',
      message:
        `${at} ignores ${probe.replaceCondition}: a replace with a stale version was accepted. ` +
        'A holder whose lease was taken over could overwrite the new holder; do not use this store with fencelock',
    })
  } else if (!next.ok && !second.ok) {
    findings.push({
      level: 'warn',
      message: `${at} refused a replace with the current version of the probe object (someone else wrote it?)`,
    })
  }
  if (findings.length === 0) {
    findings.push({
      level: 'ok',
      message:
        `${at} enforces ${probe.createCondition} and ${probe.replaceCondition}: a probe object of doctor's own, ` +
        `${probe.key}, refused a second create and a stale replace (only a write shows it; doctor deletes it after)`,
    })
  }
  findings.push(clockFinding(at, clock))
  return findings
}

/**
 * Whether the store's answers show its clock (the HTTP `Date`), which lifts fences above those of a record
 * deleted behind fencelock's back (fence.ts); without it a deleted record restarts its fence at 1.
 */
function clockFinding(at: string, clock: ServerClock): DoctorFinding {
  if (clock.seconds === undefined) {
    return {
      level: 'warn',
      message:
        `${at} shows no clock in its answers (no Date header): fences are the record's counter alone, and ` +
        'restart at 1 if a lock record is deleted (a lifecycle rule, a clean-up). Never delete lock records on this store',
    }
  }
  const skew = Math.round(clock.seconds - Date.now() / 1000)
  return {
    level: 'ok',
    message:
      `${at} shows its clock (Date: ${new Date(clock.seconds * 1000).toISOString()}, ${skew} s from this machine's): ` +
      'fences stay above those of a lock record deleted at any age',
  }
}
