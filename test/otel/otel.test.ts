/**
 * `fencelock/otel` against the OpenTelemetry SDK: metrics read back through the SDK's in-memory metric
 * exporter, spans through its in-memory span exporter, and the caller's context carried by the async-hooks
 * context manager, as a Node service sets them up. Each test uses a memory store of its own and reads
 * only the measurements of that store (`fencelock.store`), so the tests share one provider.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import {
  type Attributes,
  context,
  type DiagLogger,
  DiagLogLevel,
  diag,
  type MeterProvider as MeterProviderApi,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import {
  AggregationTemporality,
  type DataPoint,
  type Histogram,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics'
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base'
import { createLockClient } from '../../src/index.js'
import { ATTR, instrument } from '../../src/otel/index.js'
import { aborted, delay, freshMemory, scripted, uniqueKey } from '../core/fakes.js'

const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
// Exports only when flushed: the interval is never reached during the run.
const reader = new PeriodicExportingMetricReader({
  exporter: metricExporter,
  exportIntervalMillis: 3_600_000,
})
const meterProvider = new MeterProvider({ readers: [reader] })
const spanExporter = new InMemorySpanExporter()
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spanExporter)] })
const contextManager = new AsyncLocalStorageContextManager()

let stop: () => void = () => {}

const ignore = () => {}
const silent: DiagLogger = { error: ignore, warn: ignore, info: ignore, debug: ignore, verbose: ignore }

before(() => {
  context.setGlobalContextManager(contextManager.enable())
  stop = instrument({ meterProvider, tracerProvider })
})

after(async () => {
  stop()
  context.disable()
  await meterProvider.shutdown()
  await tracerProvider.shutdown()
})

/** The data points of metric `name` measured for `store`, as of now. */
async function points(name: string, store: string): Promise<DataPoint<unknown>[]> {
  await reader.forceFlush()
  const latest = metricExporter.getMetrics().at(-1)
  metricExporter.reset()
  const metric = latest?.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name)
  return (metric?.dataPoints ?? []).filter((p) => p.attributes[ATTR.store] === store) as DataPoint<unknown>[]
}

/** The one data point of metric `name` for `store` whose attributes include `match`. */
async function point(name: string, store: string, match: Attributes = {}): Promise<DataPoint<unknown>> {
  const found = (await points(name, store)).filter((p) =>
    Object.entries(match).every(([k, v]) => p.attributes[k] === v),
  )
  assert.equal(found.length, 1, `${name} for ${store} with ${JSON.stringify(match)}: ${found.length} points`)
  return found[0]!
}

const histogram = (p: DataPoint<unknown>) => p.value as Histogram
const spansOf = (owner: string, name: string): ReadableSpan[] =>
  spanExporter.getFinishedSpans().filter((s) => s.name === name && s.attributes[ATTR.owner] === owner)

describe('fencelock/otel', { timeout: 60_000 }, () => {
  it('measures a granted, held and released lock, with spans under the caller’s span', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: '10s' })
    const tracer = tracerProvider.getTracer('test')
    const { lock, job } = await tracer.startActiveSpan('job', async (job) => {
      const lock = await client.acquire(uniqueKey())
      return { lock, job }
    })
    assert.equal((await point('fencelock.lock.held', backend.id)).value, 1)
    await lock.release()
    job.end()

    const common = { [ATTR.backend]: 'memory', [ATTR.store]: backend.id }
    const duration = await point('fencelock.acquire.duration', backend.id, {
      ...common,
      [ATTR.acquireOutcome]: 'granted',
    })
    assert.equal(histogram(duration).count, 1)
    assert.equal(histogram(await point('fencelock.acquire.wait_time', backend.id, common)).count, 1)
    assert.equal((await point('fencelock.lock.held', backend.id, common)).value, 0)
    const hold = await point('fencelock.lock.hold.duration', backend.id, { [ATTR.holdOutcome]: 'released' })
    assert.equal(histogram(hold).count, 1)

    const [acquireSpan] = spansOf(lock.owner, 'fencelock acquire')
    const [holdSpan] = spansOf(lock.owner, 'fencelock hold')
    assert.ok(acquireSpan && holdSpan, 'the acquire and hold spans were exported')
    assert.equal(acquireSpan.parentSpanContext?.spanId, job.spanContext().spanId)
    assert.equal(holdSpan.parentSpanContext?.spanId, job.spanContext().spanId)
    assert.deepEqual(holdSpan.links[0]?.context, acquireSpan.spanContext())
    assert.equal(acquireSpan.attributes[ATTR.fence], String(lock.fence))
    assert.equal(acquireSpan.attributes[ATTR.acquireOutcome], 'granted')
    assert.equal(acquireSpan.attributes[ATTR.attempts], 1)
    assert.equal(holdSpan.attributes[ATTR.holdOutcome], 'released')
    assert.equal(holdSpan.status.code, SpanStatusCode.UNSET)
    // Keys stay out unless asked for.
    assert.equal(acquireSpan.attributes[ATTR.key], undefined)
    assert.equal(duration.attributes[ATTR.key], undefined)
    await client.close()
  })

  it('measures the wait for a holder, and a tryAcquire refused as not_acquired, not as an error', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: '10s' })
    const key = uniqueKey()
    const holder = await client.acquire(key)
    assert.equal(await client.tryAcquire(key), null)
    const waiter = client.acquire(key, { timeout: '20s' })
    waiter.catch(() => {})
    await delay(300)
    await holder.release()
    const lock = await waiter
    await lock.release()

    const wait = await points('fencelock.acquire.wait_time', backend.id)
    const [waits] = wait.map(histogram)
    // Two grants: the holder's (no wait), the waiter's (at least 300 ms before the holder released).
    assert.ok(waits?.count === 2 && (waits.sum ?? 0) >= 0.25, `wait_time ${JSON.stringify(waits)}`)
    const refused = await point('fencelock.acquire.duration', backend.id, {
      [ATTR.acquireOutcome]: 'not_acquired',
      [ATTR.errorType]: 'FENCELOCK_NOT_ACQUIRED',
    })
    assert.equal(histogram(refused).count, 1)
    const refusedSpan = spanExporter
      .getFinishedSpans()
      .find(
        (s) =>
          s.attributes[ATTR.store] === backend.id && s.attributes[ATTR.acquireOutcome] === 'not_acquired',
      )
    assert.equal(refusedSpan?.status.code, SpanStatusCode.UNSET)
    await client.close()
  })

  it('counts a loss once, by reason, and ends the hold span as an error', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend, { ttl: 3000 })
    const key = uniqueKey()
    const lock = await client.acquire(key)
    void backend.breakLock(key)
    await aborted(lock.signal, 20_000)
    await lock.release()

    const lost = await point('fencelock.lock.lost', backend.id)
    assert.equal(lost.value, 1)
    assert.equal(lost.attributes[ATTR.lossReason], 'not_owner')
    // The release after the loss does not count the lock down a second time.
    assert.equal((await point('fencelock.lock.held', backend.id)).value, 0)
    await point('fencelock.lock.hold.duration', backend.id, { [ATTR.holdOutcome]: 'lost' })
    const [holdSpan] = spansOf(lock.owner, 'fencelock hold')
    assert.equal(holdSpan?.status.code, SpanStatusCode.ERROR)
    assert.equal(holdSpan?.attributes[ATTR.lossReason], 'not_owner')
    await client.close()
  })

  it('counts store errors by operation and cause, retried attempts included', async () => {
    let failures = 2
    const backend = scripted({
      tryAcquire: async (req, signal, inner) => {
        if (failures-- > 0) throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })
        return inner.tryAcquire(req, signal)
      },
      release: async () => {
        throw new Error('socket hang up')
      },
    })
    const client = createLockClient(backend, { ttl: '10s' })
    const lock = await client.acquire(uniqueKey(), { timeout: '20s' })
    await assert.rejects(lock.release())

    const refused = await point('fencelock.store.errors', backend.id, {
      [ATTR.operation]: 'acquire',
      [ATTR.errorType]: 'ECONNREFUSED',
      [ATTR.backend]: 'scripted',
    })
    assert.equal(refused.value, 2)
    const release = await point('fencelock.store.errors', backend.id, { [ATTR.operation]: 'release' })
    assert.equal(release.attributes[ATTR.errorType], '_OTHER')
    const [acquireSpan] = spansOf(lock.owner, 'fencelock acquire')
    assert.equal(acquireSpan?.events.filter((e) => e.name === 'fencelock.store.error').length, 2)
    const [holdSpan] = spansOf(lock.owner, 'fencelock hold')
    assert.equal(holdSpan?.status.code, SpanStatusCode.ERROR)
    await client.close()
  })

  it('reports an acquire whose store keeps failing as unavailable, and its span as an error', async () => {
    const backend = scripted({
      tryAcquire: async () => {
        throw Object.assign(new Error('connect ETIMEDOUT'), { code: 'ETIMEDOUT' })
      },
    })
    const client = createLockClient(backend)
    await assert.rejects(client.acquire(uniqueKey(), { timeout: 200 }))
    const failed = await point('fencelock.acquire.duration', backend.id, {
      [ATTR.acquireOutcome]: 'unavailable',
    })
    assert.equal(failed.attributes[ATTR.errorType], 'FENCELOCK_BACKEND_UNAVAILABLE')
    const span = spanExporter
      .getFinishedSpans()
      .find((s) => s.attributes[ATTR.store] === backend.id && s.name === 'fencelock acquire')
    assert.equal(span?.status.code, SpanStatusCode.ERROR)
    await client.close()
  })

  it('reports an aborted acquire as aborted', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const key = uniqueKey()
    const holder = await client.acquire(key)
    const stop = new AbortController()
    const waiting = client.acquire(key, { signal: stop.signal })
    waiting.catch(() => {})
    stop.abort(new Error('shutting down'))
    await assert.rejects(waiting, /shutting down/)
    await point('fencelock.acquire.duration', backend.id, { [ATTR.acquireOutcome]: 'aborted' })
    await holder.release()
    await client.close()
  })

  it('records keys only when asked: as they are, or mapped to a few names', async () => {
    const mapped = new MeterProvider({ readers: [] })
    const exporter = new InMemorySpanExporter()
    const tracers = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
    const asIs = instrument({ meterProvider: mapped, tracerProvider: tracers, recordKeys: true })
    const backend = freshMemory()
    const client = createLockClient(backend)
    const key = `reports:${uniqueKey()}`
    await (await client.acquire(key)).release()
    asIs()
    const byPrefix = instrument({
      meterProvider: mapped,
      tracerProvider: tracers,
      recordKeys: (k) => k.split(':')[0],
    })
    await (await client.acquire(key)).release()
    byPrefix()
    const keys = exporter
      .getFinishedSpans()
      .filter((s) => s.name === 'fencelock acquire')
      .map((s) => s.attributes[ATTR.key])
    assert.deepEqual(keys, [key, 'reports'])
    await client.close()
    await tracers.shutdown()
    await mapped.shutdown()
  })

  it('stops measuring once disposed', async () => {
    const backend = freshMemory()
    const client = createLockClient(backend)
    const tracers = new BasicTracerProvider({ spanProcessors: [] })
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE)
    const ownReader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 3_600_000 })
    const meters = new MeterProvider({ readers: [ownReader] })
    const dispose = instrument({ meterProvider: meters, tracerProvider: tracers })
    await (await client.acquire(uniqueKey())).release()
    dispose()
    await (await client.acquire(uniqueKey())).release()
    await ownReader.forceFlush()
    const metric = exporter
      .getMetrics()
      .at(-1)
      ?.scopeMetrics.flatMap((s) => s.metrics)
      .find((m) => m.descriptor.name === 'fencelock.acquire.duration')
    assert.equal((metric?.dataPoints[0]?.value as Histogram | undefined)?.count, 1)
    await client.close()
    await meters.shutdown()
  })

  it('never lets a failing meter break a lock: the error goes to the OpenTelemetry diag logger', async () => {
    const boom = () => {
      throw new Error('exporter bug')
    }
    const failingInstrument = { record: boom, add: boom }
    const failing = {
      getMeter: () => ({
        createHistogram: () => failingInstrument,
        createUpDownCounter: () => failingInstrument,
        createCounter: () => failingInstrument,
      }),
    } as unknown as MeterProviderApi
    const logged: unknown[] = []
    diag.setLogger({ ...silent, error: (...args: unknown[]) => logged.push(args) }, DiagLogLevel.ERROR)
    const dispose = instrument({ meterProvider: failing, tracerProvider })
    const client = createLockClient(freshMemory())
    try {
      const lock = await client.acquire(uniqueKey())
      await lock.release()
    } finally {
      dispose()
      diag.disable()
      await client.close()
    }
    assert.ok(logged.length >= 1, 'the failure was logged')
    assert.match(String(logged[0]), /fencelock\/otel: handling fencelock:acquire:ok failed/)
  })

  it('uses the global providers when given none', async () => {
    assert.ok(trace.getTracerProvider(), 'the API always has a (no-op) global provider')
    const dispose = instrument()
    const client = createLockClient(freshMemory())
    await (await client.acquire(uniqueKey())).release()
    dispose()
    await client.close()
  })
})
