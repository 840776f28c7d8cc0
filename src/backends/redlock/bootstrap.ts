/**
 * The bootstrap of a fresh Redlock set (see admission.ts): no node has a marker, every node answered. All
 * are admitted together, and only if no node holds a fence counter and nobody was admitted meanwhile.
 */
import { AdmissionError, asError, type Found, type NodeState, step, summary } from './admission-state.js'

export async function bootstrap({ x, others, own, first, closed }: Found): Promise<void> {
  // (B1) was steps 0 and 1: nobody has a marker. (B2) Nobody holds a fence counter either.
  const runIds = [own, ...first].map((s) => (s as NodeState).runId)
  const everyone = [x, ...others]
  const found = await Promise.all(everyone.map((o) => o.firstFence(closed).catch(asError)))
  const failed = found.findIndex((f) => f instanceof Error)
  if (failed >= 0) {
    throw new AdmissionError(
      'bootstrap',
      `no node of this Redlock set is admitted yet (a fresh set), and ${everyone[failed]!.address} could not be ` +
        `searched for fence counters (${(found[failed] as Error).message}); it tries again`,
    )
  }
  const holder = found.findIndex((f) => typeof f === 'string')
  if (holder >= 0) {
    throw new AdmissionError(
      'bootstrap',
      `no node of this Redlock set is admitted, yet ${everyone[holder]!.address} holds fence counters ` +
        `(${found[holder]}): this is not a fresh set, and no node can tell which counters are current, so ` +
        'none is admitted automatically. If this set was used by a fencelock without admission markers, or ' +
        'every node restarted from files holding every write, an operator can admit the nodes by hand ' +
        '(see "Fences across restarts" under Redlock in fencelock\'s README)',
    )
  }
  // (B3) Still no marker anywhere, same processes: nobody was admitted while (B2) looked, so nothing was
  // granted that (B2) could have missed. Only then (B4) admit each process seen in (B1).
  const last = await Promise.all(everyone.map((o) => step(closed, (s) => o.readState(s)).catch(asError)))
  const changed = last.findIndex((s, i) => s instanceof Error || s.marker !== null || s.runId !== runIds[i])
  if (changed >= 0) {
    throw new AdmissionError(
      'bootstrap',
      `${everyone[changed]!.address} changed while this fresh set was being admitted (${summary([everyone[changed]!], [last[changed]])})`,
      true,
    )
  }
  const admitted = await Promise.all(
    everyone.map((o, i) => step(closed, (s) => o.admit(runIds[i]!, s)).catch(() => false)),
  )
  everyone.forEach((o, i) => {
    if (admitted[i]) o.admitted(runIds[i]!)
  })
  if (!admitted[0])
    throw new AdmissionError('catching-up', 'it restarted while the fresh set was admitted', true)
}
