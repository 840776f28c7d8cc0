/**
 * The mutex's cases, in the order they run: exclusivity, timeouts, abort, release idempotence, loss, lost
 * replies on extend and release, abandonment, holder descriptions, the shape of inspect, cross-process use,
 * validity bounds, fences, key names, wake-up, and where the backend has them, FIFO order, session loss and
 * durable fences. The durable case restarts the store, so it comes last.
 */
import type { ConformanceCase } from '../../harness.js'
import { abandonCases } from './abandon.js'
import { capabilityCases } from './capabilities.js'
import { crossProcessCases } from './cross-process.js'
import { durableCases } from './durable.js'
import { exclusivityCases } from './exclusivity.js'
import { fenceCases } from './fences.js'
import { fifoCases } from './fifo.js'
import { holderCases } from './holder.js'
import { inspectCases } from './inspect.js'
import { keyCases } from './keys.js'
import { lossCases } from './loss.js'
import { lostReplyCases } from './lost-replies.js'
import { operationCases } from './operations.js'
import { sessionCases } from './session.js'
import { waitingCases } from './waiting.js'

export const mutexCases: readonly ConformanceCase[] = [
  ...capabilityCases,
  ...exclusivityCases,
  ...waitingCases,
  ...lossCases,
  ...lostReplyCases,
  ...fenceCases,
  ...keyCases,
  ...abandonCases,
  ...holderCases,
  ...inspectCases,
  ...operationCases,
  ...crossProcessCases,
  ...fifoCases,
  ...sessionCases,
  ...durableCases,
]
