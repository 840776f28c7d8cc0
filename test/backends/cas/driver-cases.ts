/**
 * The cases every object-store driver of the cas-lease engine (S3, GCS) must pass against its test server,
 * written once: conditional create and replace at the layout's object name, keys that need escaping,
 * refusals as values, failures as BackendUnavailableError (retryable for 5xx and 429), the SDK's own
 * retry after a lost response, abort, and doctor on a strict and on a lax server. Each driver's test file
 * adds what only its store has.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import type { CasAdapter } from '../../../src/engines/cas/adapter.js'
import { BackendUnavailableError } from '../../../src/index.js'
import type { FakeServer } from '../../servers/http-fake.js'

export const BUCKET = 'locks'
export const PREFIX = 'app/'
export const signal = new AbortController().signal

let keyNumber = 0
/** A lock key no other case uses. */
export const freshKey = (): string => `k${++keyNumber}`

/** One driver under test, on its running test server. */
export interface CasDriverSubject {
  /** The URL scheme's prefix in ids and messages: `s3://` or `gs://`. */
  readonly scheme: string
  server(): FakeServer<unknown, { readonly body: Buffer }>
  /** The object name of `key` under `prefix` (the backend's layout.ts). */
  objectName(key: string, prefix: string): string
  /** A driver on `bucket` (default BUCKET) under PREFIX; `retries`: the SDK's own retries on. */
  driver(options?: { readonly bucket?: string; readonly retries?: boolean }): CasAdapter
  /** The HTTP method of the driver's writes. */
  readonly writeMethod: 'PUT' | 'POST'
  /** How doctor names the two conditions. */
  readonly conditions: readonly [create: string, replace: string]
}

/** The error `call` fails with, as a BackendUnavailableError. */
export async function unavailable(call: Promise<unknown>): Promise<BackendUnavailableError> {
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

const literal = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')

/** Defines the shared cases (call inside a `describe` whose `before` starts the server). */
export function casDriverCases(subject: CasDriverSubject): void {
  const stored = (key: string) =>
    subject.server().peek(BUCKET, subject.objectName(key, PREFIX))?.body.toString()
  const write = { method: subject.writeMethod }

  it('creates only if absent, replaces only on the version read, at the layout name', async () => {
    const driver = subject.driver()
    const key = freshKey()
    assert.equal(await driver.read(key, signal), undefined)
    const created = await driver.create(key, 'one', signal)
    assert.ok(created.ok)
    assert.equal(stored(key), 'one')
    assert.deepEqual(await driver.read(key, signal), { body: 'one', version: created.version })
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
    const driver = subject.driver()
    for (const key of ['a b/ä', 'A B/Ä', '../x', 'Plain/Key']) {
      assert.ok((await driver.create(key, `body of ${key}`, signal)).ok, key)
      assert.equal(stored(key), `body of ${key}`)
    }
    assert.equal((await driver.read('A B/Ä', signal))?.body, 'body of A B/Ä')
  })

  it('refuses a replace of an absent record', async () => {
    assert.deepEqual(await subject.driver().replace(freshKey(), 'x', '1234', signal), { ok: false })
  })

  it('throws BackendUnavailableError, retryable for 5xx and 429, naming the key and the store', async () => {
    const driver = subject.driver()
    const key = freshKey()
    for (const status of [503, 500, 429] as const) {
      subject.server().failNext(1, status, write)
      const error = await unavailable(driver.create(key, 'x', signal))
      assert.equal(error.retryable, true, String(status))
      assert.match(
        error.message,
        new RegExp(`"${key}".*${literal(`${subject.scheme}${BUCKET}/${PREFIX}`)}.*HTTP ${status}`),
      )
    }
    subject.server().failNext(1, 503, { method: 'GET' })
    assert.equal((await unavailable(driver.read(key, signal))).retryable, true)
  })

  it('is not retryable when the bucket does not exist, and never calls that "no record"', async () => {
    const error = await unavailable(
      subject.driver({ bucket: 'no-such-bucket' }).create(freshKey(), 'x', signal),
    )
    assert.equal(error.retryable, false)
    assert.match(error.message, /HTTP 404/)
  })

  it('a refused create after the SDK retried its own committed write: the record is ours', async () => {
    // What the engine resolves by reading back: the first attempt committed, its reply was lost, the
    // SDK's retry met the object it had itself written.
    const driver = subject.driver({ retries: true })
    const key = freshKey()
    subject.server().dropResponseAfterCommit(1, write)
    assert.deepEqual(await driver.create(key, 'mine', signal), { ok: false })
    assert.equal((await driver.read(key, signal))?.body, 'mine')
  })

  it('rejects with the abort reason when the caller gives up', async () => {
    const driver = subject.driver()
    const release = subject.server().hold(write)
    const controller = new AbortController()
    const pending = driver.create(freshKey(), 'x', controller.signal)
    const reason = new Error('given up')
    controller.abort(reason)
    await assert.rejects(pending, (error) => error === reason)
    release()
  })

  it('doctor: ok on a server that enforces both conditions, and leaves no probe object', async () => {
    const server = subject.server()
    server.clearLog()
    // The checks (a count of lock names, where a store gives one, is an info finding of its own).
    const findings = ((await subject.driver().doctor?.(signal)) ?? []).filter((f) => f.level !== 'info')
    assert.deepEqual(
      findings.map((f) => f.level),
      ['ok', 'ok', 'ok'],
      JSON.stringify(findings),
    )
    assert.match(findings[2]!.message, /no lifecycle rule of the bucket (expires|deletes) lock objects/)
    assert.match(
      findings[1]!.message,
      /shows its clock \(Date: .*\): fences stay above those of a lock record deleted/,
    )
    const deletes = server.requests.filter((r) => r.method === 'DELETE')
    assert.equal(deletes.length, 1)
    assert.match(decodeURIComponent(deletes[0]!.path), new RegExp(`${PREFIX}\\.fencelock-doctor/`))
    assert.equal(deletes[0]!.status, 204)
  })

  it('doctor: an error finding for each condition a lax server ignores, naming the store', async () => {
    subject.server().lax(true)
    // The checks (a count of lock names, where a store gives one, is an info finding of its own).
    const findings = ((await subject.driver().doctor?.(signal)) ?? []).filter((f) => f.level !== 'info')
    assert.deepEqual(
      findings.map((f) => f.level),
      ['error', 'error', 'ok', 'ok'],
      JSON.stringify(findings),
    )
    const [create, replace] = subject.conditions
    assert.ok(
      findings[0]!.message.startsWith(`${subject.scheme}${BUCKET}/${PREFIX} (server: `),
      findings[0]!.message,
    )
    assert.ok(findings[0]!.message.includes(`ignores ${create}:`), findings[0]!.message)
    assert.ok(findings[1]!.message.includes(`ignores ${replace}:`), findings[1]!.message)
  })

  it('doctor: a warning when the server shows no clock (no Date header): fences would restart after a deletion', async () => {
    subject.server().withoutDate(true)
    try {
      // The checks (a count of lock names, where a store gives one, is an info finding of its own).
      const findings = ((await subject.driver().doctor?.(signal)) ?? []).filter((f) => f.level !== 'info')
      assert.deepEqual(
        findings.map((f) => f.level),
        ['ok', 'warn', 'ok'],
        JSON.stringify(findings),
      )
      assert.match(findings[1]!.message, /no Date header.*restart at 1 if a lock record is deleted/)
    } finally {
      subject.server().withoutDate(false)
    }
  })
}
