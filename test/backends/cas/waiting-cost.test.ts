/**
 * What waiting costs on the stores of the cas-lease engine, counted where the requests arrive: the S3 and
 * GCS test servers' logs, and a counter in DynamoDB's SDK client (DynamoDB Local is Amazon's jar). The
 * waiters of one key in one process share their reads: 1, 10 and 100 of them make about the same reads
 * per waiting second. And a waiter whose reads lag the store's writes (a caching proxy in front of S3)
 * backs off its refused takeovers instead of sending them as fast as the round trips go.
 */
import assert from 'node:assert/strict'
import { createServer, request, type Server } from 'node:http'
import { after, before, describe, it } from 'node:test'
import { dynamodbBackend } from '../../../src/backends/dynamodb/index.js'
import { createLockClient, type LockClient } from '../../../src/index.js'
import { makeTable, TABLE } from '../../kits/dynamodb.js'
import { type DynamoDbServer, localClient, startDynamoDb } from '../../servers/dynamodb.js'
import { type GcsFake, startGcsFake } from '../../servers/gcs.js'
import { type S3Fake, startS3Fake } from '../../servers/s3.js'
import { sleep } from '../../support/time.js'

const BUCKET = 'locks'
const WAIT_MS = 3000
/** Requests per waiting second may grow with the waiters by at most this factor (sharing: about 1). */
const GROWTH = 2
/**
 * Added to every request: a cloud store's round trip, during which other waiters' attempts come (the
 * test servers answer on loopback in well under a millisecond; DynamoDB Local in a few).
 */
const ROUND_TRIP_MS = 20

/** One store's clients and how many reads of lock records reached it so far. */
interface Subject {
  client(): LockClient
  reads(): number
}

let run = 0

/**
 * Reads per second while `waiters` acquires of one process wait for a key another process holds (each
 * gives up after WAIT_MS): counted from before the first of them starts until the last one gave up.
 */
async function readsPerSecond(subject: Subject, waiters: number): Promise<number> {
  const key = `job-${++run}`
  const holder = subject.client()
  const waiting = subject.client()
  try {
    const held = await holder.acquire(key, { ttl: '60s' })
    const before = subject.reads()
    const startedAt = performance.now()
    const attempts = Array.from({ length: waiters }, () => waiting.tryAcquire(key, { timeout: WAIT_MS }))
    const got = await Promise.all(attempts)
    const seconds = (performance.now() - startedAt) / 1000
    assert.ok(
      got.every((lock) => lock === null),
      'nobody took the held lock',
    )
    await held.release()
    return (subject.reads() - before) / seconds
  } finally {
    await waiting.close()
    await holder.close()
  }
}

/** Measures 1, 10 and 100 waiters and asserts the rate does not grow with them; returns the rates. */
async function assertShared(subject: Subject): Promise<string> {
  const one = await readsPerSecond(subject, 1)
  const ten = await readsPerSecond(subject, 10)
  const hundred = await readsPerSecond(subject, 100)
  const rates = `reads per waiting second: 1 waiter ${one.toFixed(1)}, 10: ${ten.toFixed(1)}, 100: ${hundred.toFixed(1)}`
  assert.ok(ten <= GROWTH * one && hundred <= GROWTH * one, rates)
  return rates
}

describe('cas stores: the waiters of one key in one process share their reads', { timeout: 180_000 }, () => {
  describe('S3', () => {
    let server: S3Fake
    before(async () => {
      process.env.AWS_ACCESS_KEY_ID ??= 'fencelock'
      process.env.AWS_SECRET_ACCESS_KEY ??= 'fencelock'
      server = await startS3Fake()
      server.createBucket(BUCKET)
      server.delay(ROUND_TRIP_MS)
    })
    after(() => server.close())

    it('1, 10 and 100 waiters: about the same GETs per second', async (t) => {
      const url = `s3://${BUCKET}/shared?endpoint=${server.endpoint}&forcePathStyle=true&region=us-east-1`
      const rates = await assertShared({
        client: () => createLockClient(url),
        reads: () => server.requests.filter((r) => r.method === 'GET').length,
      })
      t.diagnostic(rates)
    })

    it('a waiter whose reads lag the writes (a caching proxy) backs off its refused takeovers', async (t) => {
      const proxy = await startCachingProxy(server.port)
      const direct = `s3://${BUCKET}/lagging?endpoint=${server.endpoint}&forcePathStyle=true&region=us-east-1`
      const cached = `s3://${BUCKET}/lagging?endpoint=${proxy.endpoint}&forcePathStyle=true&region=us-east-1`
      const holder = createLockClient(direct, { ttl: '2s' })
      const waiter = createLockClient(cached, { ttl: '2s' })
      try {
        const held = await holder.acquire('job')
        // The waiter sees the version its first read cached while the holder renews every ~0.7 s: a
        // lease plus the margin later it tries to take over, conditioned on that version, and is
        // refused (412); its re-read, cached, shows that version still.
        const refusals = () => server.requests.filter((r) => r.method === 'PUT' && r.status === 412).length
        const before = refusals()
        const startedAt = performance.now()
        assert.equal(await waiter.tryAcquire('job', { timeout: '6s' }), null)
        // A takeover became possible ~2.2 s after the first read: the rest of the wait was refusals.
        const seconds = (performance.now() - startedAt) / 1000 - 2.2
        const refused = refusals() - before
        assert.equal(held.signal.aborted, false, 'the holder kept its lock')
        // 100, 200, 400, 800 ms, then a third of the lease (at least 1 s): about 6 in ~4 s.
        const measured = `${refused} refused conditional PUTs in ${seconds.toFixed(1)} s`
        assert.ok(refused <= 12, measured)
        t.diagnostic(measured)
        // Once the proxy serves fresh reads again, a release is seen and the lock taken.
        proxy.caching = false
        await held.release()
        const lock = await waiter.acquire('job', { timeout: '10s' })
        await lock.release()
      } finally {
        await waiter.close()
        await holder.close()
        await proxy.close()
      }
    })
  })

  describe('GCS', () => {
    let server: GcsFake
    before(async () => {
      server = await startGcsFake()
      server.createBucket(BUCKET)
      server.delay(ROUND_TRIP_MS)
    })
    after(() => server.close())

    it('1, 10 and 100 waiters: about the same GETs per second', async (t) => {
      const url = `gs://${BUCKET}/shared?endpoint=${server.endpoint}&project=p`
      const rates = await assertShared({
        client: () => createLockClient(url),
        reads: () => server.requests.filter((r) => r.method === 'GET').length,
      })
      t.diagnostic(rates)
    })
  })

  describe('DynamoDB', () => {
    let server: DynamoDbServer
    before(async () => {
      server = await startDynamoDb()
      const admin = localClient(server.endpoint)
      await makeTable(admin).finally(() => admin.destroy())
    })
    after(() => server?.destroy())

    it('1, 10 and 100 waiters: about the same GetItems per second', async (t) => {
      let reads = 0
      const rates = await assertShared({
        client: () => {
          const sdk = localClient(server.endpoint)
          // Counted per HTTP request (inside the SDK's retries), as the server would count them.
          sdk.middlewareStack.add(
            (next, context) => async (args) => {
              if (context.commandName === 'GetItemCommand') reads += 1
              await sleep(ROUND_TRIP_MS)
              return next(args)
            },
            { step: 'deserialize' },
          )
          const backend = dynamodbBackend({ client: sdk, table: TABLE })
          const close = backend.close
          return createLockClient({
            ...backend,
            close: async () => {
              await close()
              sdk.destroy()
            },
          })
        },
        reads: () => reads,
      })
      t.diagnostic(rates)
    })
  })
})

/**
 * An HTTP proxy to 127.0.0.1:`target` that answers every GET of a path with its first answer while
 * `caching` is on (a cache in front of a store, which then shows stale versions); everything else, and
 * every GET once `caching` is off, goes through.
 */
async function startCachingProxy(target: number) {
  const cache = new Map<string, { status: number; headers: Record<string, string>; body: Buffer }>()
  const state = { caching: true }
  const proxy: Server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const path = req.url ?? '/'
      const hit = state.caching && req.method === 'GET' ? cache.get(path) : undefined
      if (hit) {
        res.writeHead(hit.status, hit.headers)
        res.end(hit.body)
        return
      }
      const out = request(
        { port: target, host: '127.0.0.1', method: req.method, path, headers: req.headers },
        (up) => {
          const body: Buffer[] = []
          up.on('data', (c: Buffer) => body.push(c))
          up.on('end', () => {
            const headers = Object.fromEntries(
              Object.entries(up.headers).filter((e): e is [string, string] => typeof e[1] === 'string'),
            )
            const answer = { status: up.statusCode ?? 500, headers, body: Buffer.concat(body) }
            if (state.caching && req.method === 'GET') cache.set(path, answer)
            res.writeHead(answer.status, answer.headers)
            res.end(answer.body)
          })
        },
      )
      out.on('error', () => res.destroy())
      out.end(Buffer.concat(chunks))
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  const { port } = proxy.address() as { port: number }
  return {
    endpoint: `http://127.0.0.1:${port}`,
    set caching(on: boolean) {
      state.caching = on
      if (!on) cache.clear()
    },
    close: () =>
      new Promise<void>((resolve) => {
        proxy.close(() => resolve())
        proxy.closeAllConnections()
      }),
  }
}
