/**
 * The GCS driver of the cas-lease engine against the GCS test server (test/servers/gcs.ts), through the
 * official SDK: generation preconditions, refusals as values, failures as BackendUnavailableError, the
 * SDK's own retries after a lost response, and doctor catching a server that ignores the preconditions.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import { Storage, type StorageOptions } from '@google-cloud/storage'
import { GcsCasDriver, lockObjectName } from '../../src/backends/gcs/index.js'
import { BackendUnavailableError } from '../../src/index.js'
import { type GcsFake, startGcsFake } from '../servers/gcs.js'

const BUCKET = 'locks'
const PREFIX = 'app/'
const signal = new AbortController().signal

let server: GcsFake
let keyNumber = 0
/** A lock key no other test uses. */
const freshKey = () => `k${++keyNumber}`

const client = (options: StorageOptions = {}) =>
  new Storage({
    apiEndpoint: server.endpoint,
    projectId: 'test',
    retryOptions: { autoRetry: false },
    ...options,
  })

const driverOf = (storage: Storage, bucket = BUCKET) =>
  new GcsCasDriver({ storage, bucket, prefix: PREFIX, id: `gs://${bucket}/${PREFIX}` })

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

describe('gcs driver', { timeout: 60_000 }, () => {
  let storage: Storage
  before(async () => {
    server = await startGcsFake()
    server.createBucket(BUCKET)
    storage = client()
  })
  after(() => server.close())
  beforeEach(() => server.clearFaults())

  it('creates only if absent, replaces only on the generation read, at the layout name', async () => {
    const driver = driverOf(storage)
    const key = freshKey()
    assert.equal(await driver.read(key, signal), undefined)
    const created = await driver.create(key, 'one', signal)
    assert.ok(created.ok)
    const stored = server.peek(BUCKET, lockObjectName(key, PREFIX))
    assert.equal(stored?.body.toString(), 'one')
    assert.equal(created.version, String(stored?.generation), 'the version is the generation')
    assert.equal(stored?.cacheControl, 'no-store')
    assert.deepEqual(await driver.read(key, signal), { body: 'one', version: created.version })
    assert.deepEqual(await driver.create(key, 'two', signal), { ok: false })
    const replaced = await driver.replace(key, 'three', created.version, signal)
    assert.ok(replaced.ok)
    assert.notEqual(replaced.version, created.version)
    assert.deepEqual(
      await driver.replace(key, 'four', created.version, signal),
      { ok: false },
      'stale generation',
    )
    assert.equal((await driver.read(key, signal))?.body, 'three')
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

  it('keeps keys that need escaping apart, case included', async () => {
    const driver = driverOf(storage)
    for (const key of ['a b/ä', 'A B/Ä', '../x', 'Plain/Key']) {
      assert.ok((await driver.create(key, `body of ${key}`, signal)).ok, key)
      assert.equal(server.peek(BUCKET, lockObjectName(key, PREFIX))?.body.toString(), `body of ${key}`)
    }
    assert.equal((await driver.read('A B/Ä', signal))?.body, 'body of A B/Ä')
  })

  it('refuses a replace of an absent record', async () => {
    assert.deepEqual(await driverOf(storage).replace(freshKey(), 'x', '1234', signal), { ok: false })
  })

  it('throws BackendUnavailableError, retryable for 5xx and 429, naming the key and the store', async () => {
    const driver = driverOf(storage)
    const key = freshKey()
    for (const status of [503, 500, 429] as const) {
      server.failNext(1, status, { method: 'POST' })
      const error = await unavailable(driver.create(key, 'x', signal))
      assert.equal(error.retryable, true, String(status))
      assert.match(error.message, new RegExp(`"${key}".*gs://${BUCKET}/${PREFIX}.*HTTP ${status}`))
    }
    server.failNext(1, 503, { method: 'GET' })
    assert.equal((await unavailable(driver.read(key, signal))).retryable, true)
  })

  it('is not retryable when the bucket does not exist', async () => {
    const error = await unavailable(driverOf(storage, 'no-such-bucket').create(freshKey(), 'x', signal))
    assert.equal(error.retryable, false)
    assert.match(error.message, /HTTP 404/)
  })

  it('a refused create after the SDK retried its own committed upload: the record is ours', async () => {
    const driver = driverOf(client({ retryOptions: { autoRetry: true, maxRetryDelay: 1 } }))
    const key = freshKey()
    server.dropResponseAfterCommit(1, { method: 'POST' })
    assert.deepEqual(await driver.create(key, 'mine', signal), { ok: false })
    assert.equal((await driver.read(key, signal))?.body, 'mine')
  })

  it('rejects with the abort reason when the caller gives up', async () => {
    const driver = driverOf(storage)
    const release = server.hold({ method: 'POST' })
    const controller = new AbortController()
    const write = driver.create(freshKey(), 'x', controller.signal)
    const reason = new Error('given up')
    controller.abort(reason)
    await assert.rejects(write, (error) => error === reason)
    release()
  })

  it('doctor: ok on a server that enforces the preconditions, and leaves no probe object', async () => {
    const driver = driverOf(storage)
    server.clearLog()
    const findings = await driver.doctor(signal)
    assert.deepEqual(
      findings.map((f) => f.level),
      ['ok'],
      JSON.stringify(findings),
    )
    const deletes = server.requests.filter((r) => r.method === 'DELETE')
    assert.equal(deletes.length, 1)
    assert.match(decodeURIComponent(deletes[0]!.path), new RegExp(`/o/${PREFIX}\\.fencelock-doctor/`))
    assert.equal(deletes[0]!.status, 204)
  })

  it('doctor: an error finding for each precondition a lax server ignores, naming the server', async () => {
    server.lax(true)
    const findings = await driverOf(storage).doctor(signal)
    assert.deepEqual(
      findings.map((f) => f.level),
      ['error', 'error'],
      JSON.stringify(findings),
    )
    assert.ok(findings[0]!.message.includes(`(server: ${server.endpoint})`), findings[0]!.message)
    assert.match(findings[0]!.message, /ignores ifGenerationMatch=0/)
    assert.match(findings[1]!.message, /ignores ifGenerationMatch=<generation>/)
  })
})
