/**
 * `fencelock/otel`: OpenTelemetry metrics and spans for every lock client of the process, made from the
 * core's diagnostics channels (core/diagnostics.ts). The only module that imports `@opentelemetry/api`,
 * an optional peer dependency: the rest of fencelock never loads it, and without `instrument()` nothing
 * listens, so the channels cost nothing. docs/observability.md lists what is emitted.
 *
 * A subscriber of a diagnostics channel runs inside the publishing call, and an exception there would
 * surface as an uncaught exception in the user's process: every handler here is guarded, and reports
 * through OpenTelemetry's own `diag` logger instead.
 */
import * as diagnosticsChannel from 'node:diagnostics_channel'
import {
  type Attributes,
  type Counter,
  context,
  diag,
  type Histogram,
  type MeterProvider,
  metrics,
  type Span,
  SpanStatusCode,
  type TracerProvider,
  trace,
  type UpDownCounter,
} from '@opentelemetry/api'
import { channels } from '../core/diagnostics.js'
import { ATTR, acquireOutcome, backendKind, errorType } from './attributes.js'

export { ATTR } from './attributes.js'

/** Options of {@link instrument}. */
export interface InstrumentOptions {
  /** Where the metrics go. @default the global meter provider (`metrics.getMeterProvider()`) */
  readonly meterProvider?: MeterProvider | undefined
  /** Where the spans go. @default the global tracer provider (`trace.getTracerProvider()`) */
  readonly tracerProvider?: TracerProvider | undefined
  /**
   * Put the lock's key on spans and metrics as `fencelock.key`: `true` for the key itself, or a function
   * that maps a key to a small set of names (return `undefined` to leave it out). Off by default: keys
   * are often one per job, user or record, and each one would become a metric series of its own, without
   * bound; and a key may name what it protects (an account, an e-mail address) in a telemetry backend
   * that more people can read than the data.
   * @default false
   * @example
   * instrument({ recordKeys: (key) => key.split(':')[0] }) // 'reports:nightly' -> 'reports'
   */
  readonly recordKeys?: boolean | ((key: string) => string | undefined) | undefined
}

/** The instrumentation scope's name: the meter's and the tracer's. */
const SCOPE = 'fencelock'

/**
 * Bucket bounds of the duration histograms, in seconds: from an uncontended in-memory grant (sub-ms) to
 * a waiter that waited minutes.
 */
const DURATION_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
]

/** What every message of the channels has. */
interface Message {
  readonly key: string
  readonly backend: string
  readonly owner: string
}

/** An acquire under way: its span, if it began after `instrument()`. */
interface Acquiring {
  readonly span: Span
}

/** A held lock: the attributes it was counted with, when it was granted, and its span. */
interface Holding {
  readonly attributes: Attributes
  readonly grantedAt: number
  readonly span: Span
}

/**
 * Starts turning fencelock's diagnostics into OpenTelemetry metrics and spans, for every lock client in
 * the process; returns the function that stops it. Call it once, before the clients are used: a lock
 * acquired earlier is not counted as held.
 * @example
 * import { metrics, trace } from '@opentelemetry/api'
 *
 * const stop = instrument({ meterProvider: metrics.getMeterProvider(), tracerProvider: trace.getTracerProvider() })
 * // ... on shutdown:
 * stop()
 */
export function instrument(options: InstrumentOptions = {}): () => void {
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter(SCOPE)
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer(SCOPE)
  const keyOf = keyRecorder(options.recordKeys)

  const acquireDuration: Histogram = meter.createHistogram('fencelock.acquire.duration', {
    description: 'Time from the start of an acquire to its grant or failure',
    unit: 's',
    advice: { explicitBucketBoundaries: DURATION_BUCKETS },
  })
  const waitTime: Histogram = meter.createHistogram('fencelock.acquire.wait_time', {
    description:
      'Time a granted acquire waited for other holders (or for the store) before its granting attempt',
    unit: 's',
    advice: { explicitBucketBoundaries: DURATION_BUCKETS },
  })
  const held: UpDownCounter = meter.createUpDownCounter('fencelock.lock.held', {
    description: 'Locks held by this process',
    unit: '{lock}',
  })
  const holdDuration: Histogram = meter.createHistogram('fencelock.lock.hold.duration', {
    description: 'Time from a grant to its release or loss',
    unit: 's',
    advice: { explicitBucketBoundaries: DURATION_BUCKETS },
  })
  const lost: Counter = meter.createCounter('fencelock.lock.lost', {
    description: 'Held locks lost before their release',
    unit: '{lock}',
  })
  const storeErrors: Counter = meter.createCounter('fencelock.store.errors', {
    description: 'Calls the store failed or did not answer in time, retried ones included',
    unit: '{error}',
  })

  /** The attributes every measurement of a lock carries. */
  const lockAttributes = (message: Message): Attributes => {
    const attributes: Attributes = {
      [ATTR.backend]: backendKind(message.backend),
      [ATTR.store]: message.backend,
    }
    const key = keyOf(message.key)
    if (key !== undefined) attributes[ATTR.key] = key
    return attributes
  }

  // Keyed by owner: an id unique to one acquire, the same on all of its messages.
  const acquiring = new Map<string, Acquiring>()
  const holding = new Map<string, Holding>()

  const onStart = (message: Message & { ttlMs: number; timeoutMs: number }) => {
    const span = tracer.startSpan(
      'fencelock acquire',
      { attributes: lockAttributes(message) },
      context.active(),
    )
    acquiring.set(message.owner, { span })
  }

  const onGranted = (
    message: Message & { fence: bigint; attempts: number; waitedMs: number; attemptMs: number },
  ) => {
    const attributes = lockAttributes(message)
    acquireDuration.record(message.waitedMs / 1000, { ...attributes, [ATTR.acquireOutcome]: 'granted' })
    waitTime.record(Math.max(0, message.waitedMs - message.attemptMs) / 1000, attributes)
    held.add(1, attributes)
    const acquire = acquiring.get(message.owner)
    acquiring.delete(message.owner)
    const lock = {
      [ATTR.owner]: message.owner,
      [ATTR.fence]: String(message.fence),
      [ATTR.attempts]: message.attempts,
    }
    acquire?.span.setAttributes({ ...lock, [ATTR.acquireOutcome]: 'granted' })
    acquire?.span.end()
    const span = tracer.startSpan(
      'fencelock hold',
      {
        attributes: { ...attributes, ...lock },
        ...(acquire ? { links: [{ context: acquire.span.spanContext() }] } : {}),
      },
      context.active(),
    )
    holding.set(message.owner, { attributes, grantedAt: performance.now(), span })
  }

  const onFailed = (
    message: Message & { attempts: number; waitedMs: number; aborted: boolean; error: unknown },
  ) => {
    const outcome = acquireOutcome(message.error, message.aborted)
    const type = errorType(message.error)
    acquireDuration.record(message.waitedMs / 1000, {
      ...lockAttributes(message),
      [ATTR.acquireOutcome]: outcome,
      [ATTR.errorType]: type,
    })
    const acquire = acquiring.get(message.owner)
    if (!acquire) return
    acquiring.delete(message.owner)
    acquire.span.setAttributes({
      [ATTR.owner]: message.owner,
      [ATTR.attempts]: message.attempts,
      [ATTR.acquireOutcome]: outcome,
      [ATTR.errorType]: type,
    })
    // Contention and an abort are answers the caller asked for (a timeout, a signal), not failures.
    if (outcome === 'unavailable' || outcome === 'error') {
      acquire.span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(message.error) })
    }
    acquire.span.end()
  }

  /** A held lock's end, by release or loss: counted once, whichever comes first. */
  const endHold = (owner: string, outcome: 'released' | 'lost'): Holding | undefined => {
    const hold = holding.get(owner)
    if (!hold) return undefined
    holding.delete(owner)
    held.add(-1, hold.attributes)
    holdDuration.record((performance.now() - hold.grantedAt) / 1000, {
      ...hold.attributes,
      [ATTR.holdOutcome]: outcome,
    })
    hold.span.setAttribute(ATTR.holdOutcome, outcome)
    return hold
  }

  const onLost = (message: Message & { reason: string; error: unknown }) => {
    lost.add(1, { ...lockAttributes(message), [ATTR.lossReason]: message.reason })
    const hold = endHold(message.owner, 'lost')
    if (!hold) return
    hold.span.setAttribute(ATTR.lossReason, message.reason)
    hold.span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(message.error) })
    hold.span.end()
  }

  const onRelease = (message: Message & { released: boolean; error?: unknown }) => {
    const hold = endHold(message.owner, 'released')
    if (!hold) return
    if (message.error !== undefined) {
      hold.span.setAttribute(ATTR.errorType, errorType(message.error))
      hold.span.setStatus({ code: SpanStatusCode.ERROR, message: errorMessage(message.error) })
    }
    hold.span.end()
  }

  const onStoreError = (message: Message & { operation: string; error: unknown }) => {
    const type = errorType(message.error)
    storeErrors.add(1, {
      ...lockAttributes(message),
      [ATTR.operation]: message.operation,
      [ATTR.errorType]: type,
    })
    // On the span of the acquire that retries, or of the lock that could not be renewed or released.
    const span = acquiring.get(message.owner)?.span ?? holding.get(message.owner)?.span
    span?.addEvent('fencelock.store.error', {
      [ATTR.operation]: message.operation,
      [ATTR.errorType]: type,
      'exception.message': errorMessage(message.error),
    })
  }

  const subscriptions: Array<[diagnosticsChannel.Channel, (message: never) => void]> = [
    [channels.acquireStart, onStart],
    [channels.acquireOk, onGranted],
    [channels.acquireFail, onFailed],
    [channels.lost, onLost],
    [channels.release, onRelease],
    [channels.storeError, onStoreError],
  ]
  const subscribed = subscriptions.map(([channel, handler]) => {
    const guarded = (message: unknown) => {
      try {
        handler(message as never)
      } catch (error) {
        diag.error(`fencelock/otel: handling ${String(channel.name)} failed`, error)
      }
    }
    // By name: copies of fencelock loaded twice in one process (two versions) publish on the same channels.
    diagnosticsChannel.subscribe(channel.name, guarded)
    return () => diagnosticsChannel.unsubscribe(channel.name, guarded)
  })
  return () => {
    for (const unsubscribe of subscribed.splice(0)) unsubscribe()
    // Spans of acquires and holds still open are left unended: ending them now would report a false end.
    acquiring.clear()
    holding.clear()
  }
}

/** What `recordKeys` asks for, as a function from a key to its attribute value (undefined: none). */
function keyRecorder(option: InstrumentOptions['recordKeys']): (key: string) => string | undefined {
  if (typeof option === 'function') return option
  return option ? (key) => key : () => undefined
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
