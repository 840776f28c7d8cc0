/**
 * The bootstrap of a fresh Redlock set (see admission.ts for when a set counts as fresh, and why that is
 * safe): no node that answered has a marker. The nodes that answered are admitted together, and only if
 * they are a majority, none holds a fence counter, and nobody was admitted meanwhile. They are marked
 * fresh too, and vote at once: no lock was granted on the set before them. A client that has seen the set
 * in use bootstraps only with every node answering, and without marking them fresh (every node of a set in
 * use has lost its memory: their locks are kept out for restartDelay, as after any restart).
 */
import {
  AdmissionError,
  addresses,
  asError,
  type CatchUpNode,
  type Found,
  type NodeState,
  step,
  summary,
} from './admission-state.js'

export async function bootstrap(
  { x, others, n, q, own, first, closed }: Found,
  sawUse: boolean,
): Promise<void> {
  // (B1) was steps 0 and 1: no node that answered has a marker. They must be a majority (all, after use).
  const everyone: CatchUpNode[] = [x]
  const runIds: string[] = [own.runId]
  others.forEach((o, i) => {
    const state = first[i]
    if (state === undefined || state instanceof Error) return
    everyone.push(o)
    runIds.push((state as NodeState).runId)
  })
  const needed = sawUse ? n : q
  if (everyone.length < needed) {
    const silent = others.filter((o) => !everyone.includes(o))
    throw new AdmissionError(
      'bootstrap',
      sawUse
        ? `every node lost its state: waits for all ${n} to answer (${addresses(silent)} do not)`
        : `fresh set: votes once ${q} of ${n} answer`,
    )
  }
  // (B2) Nobody holds a fence counter either.
  const found = await Promise.all(everyone.map((o) => o.firstFence(closed).catch(asError)))
  const failed = found.findIndex((f) => f instanceof Error)
  if (failed >= 0) {
    throw new AdmissionError(
      'bootstrap',
      `fresh set: could not search ${everyone[failed]!.address} for fence counters ` +
        `(${(found[failed] as Error).message}); tries again`,
    )
  }
  const holder = found.findIndex((f) => typeof f === 'string')
  if (holder >= 0) {
    throw new AdmissionError(
      'bootstrap',
      `no node admitted, yet ${everyone[holder]!.address} holds fence counters (${found[holder]}): this is ` +
        'not a fresh set; see "Fences across restarts" in docs/backends/redlock.md',
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
  const fresh = !sawUse
  const admitted = await Promise.all(
    everyone.map((o, i) => step(closed, (s) => o.admit(runIds[i]!, fresh, s)).catch(() => false)),
  )
  everyone.forEach((o, i) => {
    if (admitted[i]) o.admitted(runIds[i]!, fresh)
  })
  if (!admitted[0])
    throw new AdmissionError('catching-up', 'restarted while the fresh set was admitted', true)
}
