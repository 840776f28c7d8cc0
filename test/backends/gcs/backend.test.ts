/**
 * The gs:// backend as users reach it: a URL (fromUrl and its parameters), `gcsBackend` over the user's
 * own Storage, the store's one-write-per-second-per-object rate honoured by renewals, and
 * `fencelock doctor` catching a server that ignores preconditions. Against the GCS test server.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import { Storage } from '@google-cloud/storage'
import { fromUrl, gcsBackend, lockObjectName, PARAMS } from '../../../src/backends/gcs/index.js'
import { decodeRecord } from '../../../src/engines/cas/record.js'
import { BackendUnavailableError, createLockClient } from '../../../src/index.js'
import { parseBackendUrl } from '../../../src/schemes.js'
import { type GcsFake, startGcsFake } from '../../servers/gcs.js'
import { awaitLater } from '../../support/later.js'
import { runCli } from '../../support/processes.js'
import { sleep } from '../../support/time.js'
import { waitUntil } from '../../support/wait.js'

const BUCKET = 'locks'

describe('gcs backend', { timeout: 120_000 }, () => {
  let server: GcsFake
  const urlOf = (path = '', query = '') =>
    `gs://${BUCKET}/${path}?endpoint=${server.endpoint}&project=p${query}`

  before(async () => {
    server = await startGcsFake()
    server.createBucket(BUCKET)
  })
  after(() => server.close())
  beforeEach(() => server.clearFaults())

  it('takes a URL: locks live under its path, fences grow across grants', async () => {
    const client = createLockClient(urlOf('team/locks'), { ttl: '10s' })
    try {
      const first = await client.acquire('job')
      const name = lockObjectName('job', 'team/locks/')
      assert.equal(decodeRecord(server.peek(BUCKET, name)!.body.toString())?.owner, first.owner)
      await first.release()
      const second = await client.acquire('job')
      assert.ok(second.fence > first.fence)
      await second.release()
      // Released, or already retired (deleted) when the store's clock allowed it by then.
      const left = server.peek(BUCKET, name)
      assert.ok(left === undefined || decodeRecord(left.body.toString())?.state === 'released')
    } finally {
      await client.close()
    }
  })

  it('refuses unknown parameters, credentials in the URL and a URL without a bucket', async () => {
    await assert.rejects(fromUrl(parseBackendUrl(urlOf('', '&projet=x'))), /did you mean "project"/)
    await assert.rejects(
      fromUrl(new URL(`gs://key:secret@${BUCKET}/`)),
      /no credentials in gs:\/\/key:\*\*\*@/,
    )
    await assert.rejects(fromUrl(new URL('gs:///prefix')), /Expected a bucket/)
    assert.deepEqual(Object.keys(PARAMS).sort(), ['endpoint', 'project'])
  })

  it('a bucket that does not exist fails inspect and acquire at once, naming the bucket', async () => {
    const client = createLockClient(`gs://no-such-bucket/app?endpoint=${server.endpoint}&project=p`, {
      ttl: '10s',
    })
    try {
      const missing = (error: unknown) => {
        assert.ok(error instanceof BackendUnavailableError, String(error))
        assert.match(
          error.message,
          /bucket "no-such-bucket" does not exist: create it \(gcloud storage buckets create gs:\/\/no-such-bucket\)/,
        )
        assert.equal(error.retryable, false)
        return true
      }
      await assert.rejects(client.inspect('job'), missing)
      await assert.rejects(client.tryAcquire('job'), missing)
      await assert.rejects(client.acquire('job', { timeout: '30s' }), missing)
    } finally {
      await client.close()
    }
  })

  it('refuses a ttl its write rate cannot renew (under 3 s), before any request', async () => {
    const client = createLockClient(urlOf('short'), { ttl: '10s' })
    try {
      server.clearLog()
      const atLeast = (got: number) => (error: unknown) => {
        assert.ok(error instanceof TypeError, String(error))
        assert.match(error.message, /`ttl` to be at least 3000 ms on gs:\/\/locks\/short\?endpoint=/)
        assert.match(error.message, new RegExp(`got ${got} ms`))
        return true
      }
      await assert.rejects(client.acquire('job', { ttl: '800ms' }), atLeast(800))
      await assert.rejects(client.tryAcquire('job', { ttl: '1.2s' }), atLeast(1200))
      assert.deepEqual(server.requests, [], 'no request reached the store')
      const lock = await client.acquire('job', { ttl: '3s' })
      await assert.rejects(lock.extend('2s'), atLeast(2000))
      await lock.release()
    } finally {
      await client.close()
    }
  })

  // The server counts its rate from each write's commit, which may come late in a slow request (the
  // client's first request pays for its start-up): the engine spaces a key's writes from when the
  // previous one was ANSWERED. Spaced from its send, the first renewal came too soon after a slow create.
  it('renewals never write one object faster than GCS allows (about once a second)', async () => {
    // The server answers 429 to a second write of one name within a second, as GCS may.
    server.settings.mutationIntervalMs = 1000
    const storage = new Storage({
      apiEndpoint: server.endpoint,
      projectId: 'p',
      retryOptions: { autoRetry: false },
    })
    // The shortest ttl GCS takes: the core renews every ttl/3 = 1 s, as often as the store allows.
    const client = createLockClient(gcsBackend({ client: storage, bucket: BUCKET, prefix: 'rate' }), {
      ttl: '3s',
    })
    try {
      server.clearLog()
      // The create reaches its commit 0.8 s after it was sent (and is answered right then): the first
      // renewal is due ttl/3 = 1 s after the send, 0.2 s after the commit, sooner than the store's rate:
      // the engine waits until a second after the answer, with over a second of validity to spare.
      const release = server.hold({ method: 'POST' })
      const acquired = awaitLater(client.acquire('renewed'))
      await waitUntil(() => server.inFlight === 1, 'the create held at the server')
      await sleep(800)
      release()
      const lock = await acquired
      await sleep(6000)
      assert.equal(lock.signal.aborted, false, `lost: ${lock.signal.reason}`)
      await lock.release()
      const writes = server.requests.filter((r) => r.method === 'POST')
      assert.ok(writes.length >= 5, `${writes.length} writes: renewals happened`)
      assert.deepEqual(
        writes.filter((r) => r.status === 429),
        [],
        'no write was throttled',
      )
    } finally {
      server.settings.mutationIntervalMs = 0
      await client.close()
    }
  })

  it('fencelock doctor: ok on the test server, an error naming the server when it ignores preconditions', async () => {
    const good = await runCli(['doctor', urlOf('doctor')])
    assert.equal(good.code, 0, good.stdout + good.stderr)
    assert.match(good.stdout, /^ok +.*enforces ifGenerationMatch=0 and ifGenerationMatch=<generation>/m)
    assert.match(good.stdout, /^info +lock names kept: 0 \(objects under "doctor\/"\)/m)
    server.lax(true)
    const lax = await runCli(['doctor', urlOf('doctor')])
    assert.equal(lax.code, 69, lax.stdout + lax.stderr)
    assert.ok(lax.stdout.includes(`(server: ${server.endpoint}) ignores ifGenerationMatch=0`), lax.stdout)
    assert.match(lax.stdout, /^error +.* ignores ifGenerationMatch=<generation>/m)
  })
})
