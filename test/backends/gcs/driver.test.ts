/**
 * The GCS driver of the cas-lease engine against the GCS test server (test/servers/gcs.ts), through the
 * official SDK: the shared driver cases (cas-driver-cases.ts), plus GCS's own: the version is the
 * generation, only compared for equality, and the record is written `no-store`.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import { Storage } from '@google-cloud/storage'
import { GcsCasAdapter, lockObjectName } from '../../../src/backends/gcs/index.js'
import { type GcsFake, startGcsFake } from '../../servers/gcs.js'
import { BUCKET, casDriverCases, freshKey, PREFIX, signal } from '../cas/driver-cases.js'

let server: GcsFake

const client = (autoRetry = false) =>
  new Storage({
    apiEndpoint: server.endpoint,
    projectId: 'test',
    retryOptions: { autoRetry, maxRetryDelay: 1 },
  })

const driverOf = (storage: Storage, bucket = BUCKET) =>
  new GcsCasAdapter({ storage, bucket, prefix: PREFIX, id: `gs://${bucket}/${PREFIX}` })

describe('gcs driver', { timeout: 60_000 }, () => {
  let storage: Storage
  before(async () => {
    server = await startGcsFake()
    server.createBucket(BUCKET)
    storage = client()
  })
  after(() => server.close())
  beforeEach(() => server.clearFaults())

  casDriverCases({
    scheme: 'gs://',
    server: () => server,
    objectName: lockObjectName,
    driver: ({ bucket, retries } = {}) => driverOf(retries ? client(true) : storage, bucket),
    writeMethod: 'POST',
    conditions: ['ifGenerationMatch=0', 'ifGenerationMatch=<generation>'],
  })

  it('a read aborted before its response arrives ends without an unhandled error from the SDK', async () => {
    const driver = driverOf(storage)
    const key = freshKey()
    await driver.create(key, '{}', signal)
    const unhandled: unknown[] = []
    const onUnhandled = (reason: unknown) => unhandled.push(reason)
    process.on('unhandledRejection', onUnhandled)
    process.on('uncaughtException', onUnhandled)
    try {
      // The GET waits at the server until released: the abort lands between the request and its response.
      const release = server.hold({ method: 'GET' })
      const controller = new AbortController()
      const reading = driver.read(key, controller.signal).then(
        () => 'read',
        (error: unknown) => error,
      )
      await new Promise((resolve) => setTimeout(resolve, 200))
      const reason = new Error('given up')
      controller.abort(reason)
      assert.equal(await reading, reason, 'the read rejects with the abort at once')
      release()
      // The response now arrives for a stream nobody reads: give the SDK time to pipe it.
      await new Promise((resolve) => setTimeout(resolve, 500))
      assert.deepEqual(unhandled, [], 'the SDK threw where nobody could catch it')
    } finally {
      process.off('unhandledRejection', onUnhandled)
      process.off('uncaughtException', onUnhandled)
    }
  })

  it('doctor: a warning for a lifecycle Delete rule that may delete lock objects, none for one elsewhere', async () => {
    const bucket = storage.bucket(BUCKET)
    const lifecycle = async (matchesPrefix: string[]) => {
      await bucket.setMetadata({
        lifecycle: { rule: [{ action: { type: 'Delete' }, condition: { age: 30, matchesPrefix } }] },
      })
      return (await driverOf(storage).doctor(signal)).at(-1)!
    }
    try {
      const elsewhere = await lifecycle(['logs/'])
      assert.equal(elsewhere.level, 'ok', elsewhere.message)
      const covering = await lifecycle(['app/'])
      assert.equal(covering.level, 'warn', covering.message)
      assert.match(
        covering.message,
        /1 lifecycle Delete rule\(s\) of bucket .* may delete objects under "app\/"/,
      )
    } finally {
      await bucket.setMetadata({ lifecycle: null })
    }
  })

  it('versions are generations, the record is never cached', async () => {
    const key = freshKey()
    const created = await driverOf(storage).create(key, 'one', signal)
    assert.ok(created.ok)
    const stored = server.peek(BUCKET, lockObjectName(key, PREFIX))
    assert.equal(created.version, String(stored?.generation))
    assert.equal(stored?.cacheControl, 'no-store')
  })

  it('works with unordered generations (the version is only compared for equality)', async () => {
    server.settings.randomGenerations = true
    try {
      const driver = driverOf(storage)
      const key = freshKey()
      const created = await driver.create(key, 'one', signal)
      assert.ok(created.ok)
      const replaced = await driver.replace(key, 'two', created.version, signal)
      assert.ok(replaced.ok)
      assert.deepEqual(await driver.read(key, signal), { body: 'two', version: replaced.version })
    } finally {
      server.settings.randomGenerations = false
    }
  })
})
