/**
 * The S3 driver of the cas-lease engine against the S3 test server (test/servers/s3.ts), through the
 * official SDK: conditional create and replace, refusals as values, failures as BackendUnavailableError,
 * the SDK's own retries after a lost response, and doctor catching a server that ignores the conditions.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import * as sdk from '@aws-sdk/client-s3'
import { S3Client, type S3ClientConfig } from '@aws-sdk/client-s3'
import { lockObjectKey, S3CasDriver } from '../../src/backends/s3/index.js'
import { BackendUnavailableError } from '../../src/index.js'
import { type S3Fake, startS3Fake } from '../servers/s3.js'

const BUCKET = 'locks'
const PREFIX = 'app/'
const signal = new AbortController().signal

let server: S3Fake
let keyNumber = 0
/** A lock key no other test uses. */
const freshKey = () => `k${++keyNumber}`

const client = (config: S3ClientConfig = {}) =>
  new S3Client({
    endpoint: server.endpoint,
    forcePathStyle: true,
    region: 'eu-west-3',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
    maxAttempts: 1,
    ...config,
  })

const driverOf = (s3: S3Client, bucket = BUCKET) =>
  new S3CasDriver({
    client: s3,
    bucket,
    prefix: PREFIX,
    id: `s3://${bucket}/${PREFIX}`,
    owned: false,
    sdk: async () => sdk,
  })

/** The error `call` fails with, as a BackendUnavailableError. */
async function unavailable(call: Promise<unknown>): Promise<BackendUnavailableError> {
  try {
    await call
  } catch (error) {
    assert.ok(
      error instanceof BackendUnavailableError,
      `expected BackendUnavailableError, got ${String(error)}`,
    )
    return error
  }
  assert.fail('expected the call to fail')
}

describe('s3 driver', { timeout: 60_000 }, () => {
  let s3: S3Client
  before(async () => {
    server = await startS3Fake()
    server.createBucket(BUCKET)
    s3 = client()
  })
  after(async () => {
    s3.destroy()
    await server.close()
  })
  beforeEach(() => server.clearFaults())

  it('creates only if absent, replaces only on the version read, at the layout name', async () => {
    const driver = driverOf(s3)
    const key = freshKey()
    assert.equal(await driver.read(key, signal), undefined)
    const created = await driver.create(key, 'one', signal)
    assert.ok(created.ok)
    assert.deepEqual(await driver.read(key, signal), { body: 'one', version: created.version })
    assert.equal(server.peek(BUCKET, lockObjectKey(key, PREFIX))?.body.toString(), 'one')
    assert.deepEqual(await driver.create(key, 'two', signal), { ok: false })
    const replaced = await driver.replace(key, 'three', created.version, signal)
    assert.ok(replaced.ok)
    assert.notEqual(replaced.version, created.version)
    assert.deepEqual(
      await driver.replace(key, 'four', created.version, signal),
      { ok: false },
      'stale version',
    )
    assert.equal((await driver.read(key, signal))?.body, 'three')
  })

  it('keeps keys that need escaping apart, case included', async () => {
    const driver = driverOf(s3)
    for (const key of ['a b/ä', 'A B/Ä', '../x', 'Plain/Key']) {
      const written = await driver.create(key, `body of ${key}`, signal)
      assert.ok(written.ok, key)
      assert.equal(server.peek(BUCKET, lockObjectKey(key, PREFIX))?.body.toString(), `body of ${key}`)
    }
    assert.equal((await driver.read('a b/ä', signal))?.body, 'body of a b/ä')
  })

  it('refuses a replace of an absent record, whether the server says 404 or 412', async () => {
    const driver = driverOf(s3)
    assert.deepEqual(await driver.replace(freshKey(), 'x', '"0"', signal), { ok: false })
    server.settings.ifMatchAbsent = 412
    try {
      assert.deepEqual(await driver.replace(freshKey(), 'x', '"0"', signal), { ok: false })
    } finally {
      server.settings.ifMatchAbsent = 404
    }
  })

  it('answers a 409 ConditionalRequestConflict with a refusal (the engine re-reads)', async () => {
    const driver = driverOf(s3)
    const key = freshKey()
    server.failNext(1, 409, { method: 'PUT' })
    assert.deepEqual(await driver.create(key, 'x', signal), { ok: false })
    assert.equal(await driver.read(key, signal), undefined, 'nothing was written')
  })

  it('throws BackendUnavailableError, retryable for 5xx and 429, naming the key and the store', async () => {
    const driver = driverOf(s3)
    const key = freshKey()
    for (const status of [503, 500, 429] as const) {
      server.failNext(1, status, { method: 'PUT' })
      const error = await unavailable(driver.create(key, 'x', signal))
      assert.equal(error.retryable, true, String(status))
      assert.match(error.message, new RegExp(`"${key}".*s3://${BUCKET}/${PREFIX}.*HTTP ${status}`))
    }
    server.failNext(1, 503, { method: 'GET' })
    assert.equal((await unavailable(driver.read(key, signal))).retryable, true)
  })

  it('is not retryable when the bucket does not exist, and never calls that "no record"', async () => {
    const driver = driverOf(s3, 'no-such-bucket')
    const error = await unavailable(driver.read(freshKey(), signal))
    assert.equal(error.retryable, false)
    assert.match(error.message, /HTTP 404/)
  })

  it('a refused create after the SDK retried its own committed write: the record is ours', async () => {
    // What the engine resolves by reading back: the first attempt committed, its reply was lost, the
    // SDK's retry met the object it had itself written.
    const driver = driverOf(client({ maxAttempts: 3 }))
    const key = freshKey()
    server.dropResponseAfterCommit(1, { method: 'PUT' })
    assert.deepEqual(await driver.create(key, 'mine', signal), { ok: false })
    assert.equal((await driver.read(key, signal))?.body, 'mine')
  })

  it('a network failure is retryable', async () => {
    const driver = driverOf(s3)
    server.dropResponseAfterCommit(1, { method: 'GET' })
    assert.equal((await unavailable(driver.read(freshKey(), signal))).retryable, true)
  })

  it('rejects with the abort reason when the caller gives up', async () => {
    const driver = driverOf(s3)
    const release = server.hold({ method: 'PUT' })
    const controller = new AbortController()
    const write = driver.create(freshKey(), 'x', controller.signal)
    const reason = new Error('given up')
    controller.abort(reason)
    await assert.rejects(write, (error) => error === reason)
    release()
  })

  it('doctor: ok on a server that enforces both conditions, and leaves no probe object', async () => {
    const driver = driverOf(s3)
    server.clearLog()
    const findings = await driver.doctor(signal)
    assert.deepEqual(
      findings.map((f) => f.level),
      ['ok'],
      JSON.stringify(findings),
    )
    const deletes = server.requests.filter((r) => r.method === 'DELETE')
    assert.equal(deletes.length, 1)
    assert.match(
      decodeURIComponent(deletes[0]!.path),
      new RegExp(`^/${BUCKET}/${PREFIX}\\.fencelock-doctor/`),
    )
    assert.equal(deletes[0]!.status, 204)
  })

  it('doctor: an error finding for each condition a lax server ignores, naming the store', async () => {
    const driver = driverOf(s3)
    server.lax(true)
    const findings = await driver.doctor(signal)
    assert.deepEqual(
      findings.map((f) => f.level),
      ['error', 'error'],
      JSON.stringify(findings),
    )
    assert.match(findings[0]!.message, /s3:\/\/locks\/app\/ \(server: .+\) ignores If-None-Match: \*/)
    assert.match(findings[1]!.message, /ignores If-Match/)
  })

  it('never closes a client it did not make', async () => {
    const own = client()
    await driverOf(own).close()
    assert.equal(await driverOf(own).read(freshKey(), signal), undefined, 'the client still works')
    own.destroy()
  })
})
