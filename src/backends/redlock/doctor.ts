/**
 * `fencelock doctor redlock://…`: the quorum's size, each node's own findings (the Redis backend's) and its
 * admission, how many nodes can vote, and the restart rule in force.
 */
import type { DoctorFinding } from '../../core/backend.js'
import type { RedlockNode } from './node.js'

/** What the doctor needs to know of the backend besides its nodes. */
export interface DoctorContext {
  readonly nodes: readonly RedlockNode[]
  readonly q: number
  /** restartDelay as the user set it (undefined: the largest ttl in use). */
  readonly restartDelayMs: number | undefined
  /** The largest ttl this client has used so far (0 before any), read when the findings are made. */
  readonly largestTtlMs: () => number
}

export async function doctor(ctx: DoctorContext, signal: AbortSignal): Promise<DoctorFinding[]> {
  const { nodes, q } = ctx
  const n = nodes.length
  const findings: DoctorFinding[] = [sizeFinding(n, q)]
  const each = await Promise.allSettled(
    nodes.map(async (node) => {
      // The URL's clients connect in the background and never queue a command (enableOfflineQueue:
      // false): a check sent before the connection is up fails with "Stream isn't writeable". So wait
      // for it (a node that cannot be reached says why at its first connection error).
      await node.reachable(signal)
      await node.checked(signal)
      // Checking the connection starts the node's catch-up if it needs one: report how it ended.
      await node.settled(signal).catch(() => {})
      return [...(await node.backend.doctor!(signal)), admissionFinding(node)]
    }),
  )
  let admitted = 0
  each.forEach((r, i) => {
    const node = nodes[i]!.id
    if (r.status === 'rejected') {
      findings.push({ level: 'error', message: `${node}: ${(r.reason as Error)?.message ?? r.reason}` })
    } else for (const f of r.value) findings.push({ level: f.level, message: `${node}: ${f.message}` })
    if (nodes[i]!.admission.state === 'admitted') admitted++
  })
  findings.push(
    admitted >= q
      ? { level: 'ok', message: `${admitted} of ${n} nodes admitted: a majority (${q}) can vote` }
      : {
          level: 'error',
          message:
            `only ${admitted} of ${n} nodes admitted (a majority is ${q}): no lock can be granted until ` +
            'more are (see each node above)',
        },
  )
  findings.push(restartFinding(ctx))
  return findings
}

function sizeFinding(n: number, q: number): DoctorFinding {
  if (n < 3 || n % 2 === 0) {
    return {
      level: 'warn',
      message: `${n} node${n === 1 ? '' : 's'}: a majority is ${q}, so ${n - q} may fail. Use an odd number, at least 3`,
    }
  }
  return { level: 'ok', message: `${n} nodes: a majority is ${q}, ${n - q} may fail` }
}

/** A node's admission state, as `fencelock doctor` reports it. */
function admissionFinding(node: RedlockNode): DoctorFinding {
  const { state, reason, fresh } = node.admission
  switch (state) {
    case 'admitted':
      return {
        level: 'ok',
        message: fresh
          ? 'admitted with a fresh set (no trace of any lock then): votes without waiting for restartDelay'
          : 'admitted: its fence counters are caught up since its server started',
      }
    case 'bootstrap':
      return { level: 'warn', message: `waiting for bootstrap, does not vote yet: ${reason}` }
    case 'catching-up':
      return {
        level: 'warn',
        message: `catching up, does not vote yet: ${reason ?? 'copying the fence counters of the other nodes'}`,
      }
    default:
      return { level: 'warn', message: 'admission unknown: its connection was lost during the check' }
  }
}

function restartFinding(ctx: DoctorContext): DoctorFinding {
  const { restartDelayMs } = ctx
  const largestTtlMs = ctx.largestTtlMs()
  const delay = restartDelayMs ?? largestTtlMs
  return {
    level: 'info',
    message:
      restartDelayMs === undefined
        ? 'restartDelay is not set, so it is the largest ttl this client has used' +
          (largestTtlMs > 0 ? ` (${Math.ceil(largestTtlMs / 1000)} s so far)` : ' (none yet)') +
          ': a node counts toward a quorum once it has been up that long. Set restartDelay to the ' +
          'largest ttl any client uses on these nodes, so that every client waits as long'
        : delay > 0
          ? `a node counts toward a quorum once it has been up for ${Math.ceil(delay / 1000)} s (restartDelay)`
          : 'restartDelay is 0: safe only if every node persists each write (appendfsync always)',
  }
}
