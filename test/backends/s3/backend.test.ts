/**
 * The s3:// backend as users reach it: a URL (fromUrl and its parameters), `s3Backend` over the user's own
 * client (never closed by fencelock), a credential the store refuses, and `fencelock doctor` catching a
 * server that ignores conditional writes. Against the S3 test server, through the official SDK.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3'
import { fromUrl, lockObjectKey, PARAMS, s3Backend } from '../../../src/backends/s3/index.js'
import { decodeRecord } from '../../../src/engines/cas/record.js'
import { BackendUnavailableError, createLockClient } from '../../../src/index.js'
import { parseBackendUrl } from '../../../src/schemes.js'
import { type S3Fake, startS3Fake } from '../../servers/s3.js'
import { runCli } from '../../support/processes.js'

const BUCKET = 'locks'

describe('s3 backend', { timeout: 120_000 }, () => {
  let server: S3Fake
  const urlOf = (path = '', query = '') =>
    `s3://${BUCKET}/${path}?endpoint=${server.endpoint}&forcePathStyle=true&region=us-east-1${query}`

  before(async () => {
    // Any credentials: the SDK's default chain finds them here and in the CLI's child process.
    process.env.AWS_ACCESS_KEY_ID ??= 'fencelock-test'
    process.env.AWS_SECRET_ACCESS_KEY ??= 'fencelock-test'
    server = await startS3Fake()
    server.createBucket(BUCKET)
  })
  after(() => server.close())
  beforeEach(() => server.clearFaults())

  it('takes a URL: locks live under its path, fences grow across grants', async () => {
    const client = createLockClient(urlOf('team/locks'), { ttl: '10s' })
    try {
      const first = await client.acquire('job')
      const stored = server.peek(BUCKET, lockObjectKey('job', 'team/locks/'))
      assert.equal(decodeRecord(stored!.body.toString())?.owner, first.owner)
      await first.release()
      const second = await client.acquire('job')
      assert.ok(second.fence > first.fence)
      await second.release()
      assert.equal(
        decodeRecord(server.peek(BUCKET, lockObjectKey('job', 'team/locks/'))!.body.toString())?.state,
        'released',
      )
    } finally {
      await client.close()
    }
  })

  it('refuses unknown parameters, credentials in the URL and a URL without a bucket', async () => {
    await assert.rejects(fromUrl(parseBackendUrl(urlOf('', '&regoin=x'))), /did you mean "region"/)
    await assert.rejects(
      fromUrl(new URL(`s3://key:secret@${BUCKET}/`)),
      /no credentials in s3:\/\/key:\*\*\*@/,
    )
    await assert.rejects(fromUrl(new URL('s3:///prefix')), /Expected a bucket/)
    assert.deepEqual(Object.keys(PARAMS).sort(), ['endpoint', 'forcePathStyle', 'region'])
  })

  it('never closes the client it was given', async () => {
    const own = new S3Client({
      endpoint: server.endpoint,
      forcePathStyle: true,
      region: 'us-east-1',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
    })
    const backend = s3Backend({ client: own, bucket: BUCKET, prefix: 'own' })
    const client = createLockClient(backend, { ttl: '10s' })
    const lock = await client.acquire('x')
    await lock.release()
    await client.close()
    // The released record was retired at close: a listing shows the client still works.
    const out = await own.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: 'own/' }))
    assert.equal(out.$metadata.httpStatusCode, 200, 'the client still works after the backend closed')
    own.destroy()
  })

  it('a refused credential fails at once, not retryable', async () => {
    server.settings.rejectAccessKeyId = 'revoked'
    const own = new S3Client({
      endpoint: server.endpoint,
      forcePathStyle: true,
      region: 'us-east-1',
      credentials: { accessKeyId: 'revoked', secretAccessKey: 'b' },
    })
    const client = createLockClient(s3Backend({ client: own, bucket: BUCKET }), { ttl: '10s' })
    try {
      await assert.rejects(client.acquire('y', { timeout: '60s' }), (error: unknown) => {
        assert.ok(error instanceof BackendUnavailableError, String(error))
        assert.equal(error.retryable, false)
        assert.match(error.message, /HTTP 403/)
        return true
      })
    } finally {
      server.settings.rejectAccessKeyId = undefined
      await client.close()
      own.destroy()
    }
  })

  it('fencelock doctor counts the lock objects under the prefix, not its own probe', async () => {
    // A run's lock is retired when it exits (its client closes): nothing is kept for it.
    const ran = await runCli(['run', 'gone', '--url', urlOf('doctor-count'), '--', 'true'])
    assert.equal(ran.code, 0, ran.stderr)
    const client = createLockClient(urlOf('doctor-count'), { ttl: '30s' })
    try {
      const held = [await client.acquire('a'), await client.acquire('b')]
      const r = await runCli(['doctor', urlOf('doctor-count')])
      assert.equal(r.code, 0, r.stdout + r.stderr)
      assert.match(r.stdout, /^info +lock names kept: 2 \(objects under "doctor-count\/"\)/m)
      for (const lock of held) await lock.release()
    } finally {
      await client.close()
    }
    const after = await runCli(['doctor', urlOf('doctor-count')])
    assert.match(after.stdout, /^info +lock names kept: 0 \(objects under "doctor-count\/"\)/m)
  })

  it('fencelock doctor: ok on the test server, an error naming the store when it ignores conditions', async () => {
    const good = await runCli(['doctor', urlOf('doctor')])
    assert.equal(good.code, 0, good.stdout + good.stderr)
    assert.match(good.stdout, /^ok +.*enforces If-None-Match: \* and If-Match/m)
    assert.match(
      good.stdout,
      /a probe object of doctor's own, .*\.fencelock-doctor\/.*doctor deletes it after/,
    )
    assert.match(good.stdout, /^info +lock names kept: \d+ \(objects under "doctor\/"\)/m)
    server.lax(true)
    const lax = await runCli(['doctor', urlOf('doctor')])
    assert.equal(lax.code, 69, lax.stdout + lax.stderr)
    assert.match(lax.stdout, /^error +s3:\/\/locks\/doctor\?.* ignores If-None-Match: \*/m)
    assert.match(lax.stdout, /^error +.* ignores If-Match/m)
  })
})
