/**
 * Acceptance tests of the GCS test server (cloud-backends.md C.4, G1-G9 in both upload modes of
 * `file.save`: multipart with `resumable: false`, and resumable), run through the official
 * `@google-cloud/storage` only (raw `fetch` for `uploadType=media` and a 304, which `file.save` never
 * sends), plus one test per fault switch. The probe client has `autoRetry: false`, so each SDK call is one
 * request; the retry tests use the SDK's own retries with a short delay cap.
 */
import assert from 'node:assert/strict'
import { after, before, beforeEach, describe, it } from 'node:test'
import { type File, Storage, type StorageOptions } from '@google-cloud/storage'
import { awaitLater } from '../support/later.js'
import { waitUntil } from '../support/wait.js'
import { type GcsFake, startGcsFake } from './gcs.js'

const BUCKET = 'locks'

let server: GcsFake
let storage: Storage
let nameNumber = 0
/** An object name no other test uses (with a `/` and a space, which the SDK encodes into one segment). */
const freshName = () => `t/object ${++nameNumber}`

const client = (options: StorageOptions = {}) =>
  new Storage({
    apiEndpoint: server.endpoint,
    projectId: 'test',
    retryOptions: { autoRetry: false },
    ...options,
  })

/** A client with the SDK's default retry strategy (conditional writes retried), its delay capped at 1 s (the least it takes). */
const retryingClient = () => client({ retryOptions: { maxRetryDelay: 1 } })

interface GcsError {
  code: number
  errors?: { reason?: string }[]
}

/** The API error a call fails with; fails the test if it succeeds. */
async function gcsFailure(call: Promise<unknown>): Promise<GcsError> {
  try {
    await call
  } catch (error) {
    return error as GcsError
  }
  assert.fail('expected the call to fail')
}

const reasonOf = (error: GcsError) => error.errors?.[0]?.reason

const file = (name: string, on: Storage = storage): File => on.bucket(BUCKET).file(name)

async function generationOf(name: string): Promise<bigint> {
  const [metadata] = await file(name).getMetadata()
  assert.equal(typeof metadata.generation, 'string')
  return BigInt(metadata.generation as string)
}

const text = async (name: string) => (await file(name).download())[0].toString()

const MODES = [
  { label: 'multipart (resumable: false)', resumable: false },
  { label: 'resumable', resumable: true },
] as const

describe('test servers: GCS (through @google-cloud/storage)', { timeout: 60_000 }, () => {
  before(async () => {
    server = await startGcsFake()
    storage = client()
    await storage.createBucket(BUCKET)
  })
  after(() => server.close())
  beforeEach(() => {
    server.clearFaults()
    server.clearLog()
  })

  for (const { label, resumable } of MODES) {
    describe(`G1-G9, uploads ${label}`, () => {
      const save = (name: string, body: string, ifGenerationMatch: bigint | number, on?: Storage) =>
        file(name, on).save(body, {
          resumable,
          preconditionOpts: { ifGenerationMatch: Number(ifGenerationMatch) },
        })

      it('G1, G2: a create with ifGenerationMatch 0 succeeds once; the second gets 412 conditionNotMet', async () => {
        const name = freshName()
        await save(name, 'owner-A', 0)
        assert.ok((await generationOf(name)) > 0n)
        const error = await gcsFailure(save(name, 'owner-B', 0))
        assert.equal(error.code, 412)
        assert.equal(reasonOf(error), 'conditionNotMet')
        assert.equal(await text(name), 'owner-A')
      })

      it('G3, G4: a save with the current generation gives a greater one; with a stale one, 412', async () => {
        const name = freshName()
        await save(name, 'owner-A', 0)
        const g1 = await generationOf(name)
        await save(name, 'owner-A2', g1)
        const g2 = await generationOf(name)
        assert.ok(g2 > g1, `${g2} > ${g1}`)
        const error = await gcsFailure(save(name, 'owner-B', g1))
        assert.equal(error.code, 412)
        assert.equal(await text(name), 'owner-A2')
      })

      it('G5, G6: setMetadata with the current metageneration adds one; with a stale one, 412', async () => {
        const name = freshName()
        await save(name, 'owner-A', 0)
        const [before] = await file(name).getMetadata()
        assert.equal(before.metageneration, '1')
        await file(name).setMetadata({ metadata: { owner: 'A' } }, { ifMetagenerationMatch: 1 })
        const [after] = await file(name).getMetadata()
        assert.equal(after.metageneration, '2')
        assert.equal(after.generation, before.generation)
        assert.deepEqual(after.metadata, { owner: 'A' })
        const error = await gcsFailure(
          file(name).setMetadata({ metadata: { owner: 'B' } }, { ifMetagenerationMatch: 1 }),
        )
        assert.equal(error.code, 412)
        assert.equal(reasonOf(error), 'conditionNotMet')
      })

      it('G7, G8: a delete with a stale generation is 412 and keeps the object; with the current one it deletes', async () => {
        const name = freshName()
        await save(name, 'owner-A', 0)
        const g1 = await generationOf(name)
        await save(name, 'owner-A2', g1)
        const g2 = await generationOf(name)
        const error = await gcsFailure(file(name).delete({ ifGenerationMatch: Number(g1) }))
        assert.equal(error.code, 412)
        assert.equal((await file(name).exists())[0], true)
        await file(name).delete({ ifGenerationMatch: Number(g2) })
        assert.equal((await file(name).exists())[0], false)
      })

      it('G9: of 20 concurrent creates held together by a delay, exactly one wins', async () => {
        const name = freshName()
        server.delay(30, { path: /^\/upload\// })
        const results = await Promise.allSettled(
          Array.from({ length: 20 }, (_, i) => save(name, `owner-${i}`, 0)),
        )
        const winners = results.flatMap((r, i) => (r.status === 'fulfilled' ? [i] : []))
        assert.equal(winners.length, 1)
        for (const r of results) if (r.status === 'rejected') assert.equal((r.reason as GcsError).code, 412)
        assert.equal(server.peek(BUCKET, name)?.body.toString(), `owner-${winners[0]}`)
      })
    })
  }

  it('uploadType=media: raw bytes, the same preconditions, and a crc32c/md5 the SDK accepts on download', async () => {
    const name = freshName()
    const url = `${server.endpoint}/upload/storage/v1/b/${BUCKET}/o?uploadType=media&ifGenerationMatch=0&name=${encodeURIComponent(name)}`
    const upload = () =>
      fetch(url, { method: 'POST', body: 'hello world', headers: { 'content-type': 'text/plain' } })
    const first = await upload()
    assert.equal(first.status, 200)
    const resource = (await first.json()) as Record<string, string>
    assert.equal(resource.md5Hash, 'XrY7u+Ae7tCTyyK7j1rNww==')
    assert.equal(resource.crc32c, 'yZRlqg==')
    assert.equal(resource.contentType, 'text/plain')
    const second = await upload()
    assert.equal(second.status, 412)
    assert.equal(
      ((await second.json()) as { error: { errors: { reason: string }[] } }).error.errors[0]!.reason,
      'conditionNotMet',
    )
    assert.equal(await text(name), 'hello world')
  })

  it('contentType and custom metadata round-trip; a null metadata key is deleted by a patch', async () => {
    const name = freshName()
    await file(name).save('{}', {
      resumable: false,
      contentType: 'application/json',
      metadata: { metadata: { owner: 'A', fence: '7' } },
      preconditionOpts: { ifGenerationMatch: 0 },
    })
    const [stored] = await file(name).getMetadata()
    assert.equal(stored.contentType, 'application/json')
    assert.deepEqual(stored.metadata, { owner: 'A', fence: '7' })
    await file(name).setMetadata({ metadata: { owner: null } })
    assert.deepEqual((await file(name).getMetadata())[0].metadata, { fence: '7' })
  })

  it('generations strictly increase per name across deletes, and are never reused', async () => {
    const name = freshName()
    const seen: bigint[] = []
    for (let round = 0; round < 3; round++) {
      await file(name).save(`round ${round}`, {
        resumable: false,
        preconditionOpts: { ifGenerationMatch: 0 },
      })
      seen.push(await generationOf(name))
      await file(name).delete()
    }
    assert.ok(seen[0]! < seen[1]! && seen[1]! < seen[2]!, seen.join(' < '))
  })

  it('random generations (unordered, unique) still drive ifGenerationMatch', async () => {
    server.settings.randomGenerations = true
    try {
      const name = freshName()
      const seen = new Set<bigint>()
      for (let round = 0; round < 5; round++) {
        const current = server.peek(BUCKET, name)?.generation ?? 0n
        await file(name).save(`r${round}`, {
          resumable: false,
          preconditionOpts: { ifGenerationMatch: Number(current) },
        })
        seen.add(await generationOf(name))
      }
      assert.equal(seen.size, 5)
    } finally {
      server.settings.randomGenerations = false
    }
  })

  it('an absent object: 404 notFound first, or the failed precondition first (notFoundFirst: false)', async () => {
    const absent = file(freshName())
    const missing = await gcsFailure(absent.getMetadata())
    assert.equal(missing.code, 404)
    assert.equal(reasonOf(missing), 'notFound')
    assert.equal((await gcsFailure(absent.delete({ ifGenerationMatch: 5 }))).code, 404)
    server.settings.notFoundFirst = false
    try {
      assert.equal((await gcsFailure(absent.delete({ ifGenerationMatch: 5 }))).code, 412)
      assert.equal((await gcsFailure(absent.delete({ ifGenerationMatch: 0 }))).code, 404)
    } finally {
      server.settings.notFoundFirst = true
    }
  })

  it('ifGenerationNotMatch on a metadata read is 304 when it matches', async () => {
    const name = freshName()
    await file(name).save('x', { resumable: false })
    const generation = await generationOf(name)
    const url = `${server.endpoint}/storage/v1/b/${BUCKET}/o/${encodeURIComponent(name)}`
    assert.equal((await fetch(`${url}?ifGenerationNotMatch=${generation}`)).status, 304)
    assert.equal((await fetch(`${url}?ifGenerationNotMatch=${generation + 1n}`)).status, 200)
  })

  it('lists objects by prefix, page by page', async () => {
    for (const n of ['list/a', 'list/b', 'list/c', 'other']) await file(n).save('x', { resumable: false })
    const [firstPage, next] = await storage
      .bucket(BUCKET)
      .getFiles({ prefix: 'list/', maxResults: 2, autoPaginate: false })
    assert.deepEqual(
      firstPage.map((f) => f.name),
      ['list/a', 'list/b'],
    )
    const [rest] = await storage.bucket(BUCKET).getFiles({ ...next, autoPaginate: false })
    assert.deepEqual(
      rest.map((f) => f.name),
      ['list/c'],
    )
  })

  it('creating an existing bucket is 409 conflict', async () => {
    const error = await gcsFailure(storage.createBucket(BUCKET))
    assert.equal(error.code, 409)
    assert.equal(reasonOf(error), 'conflict')
  })

  describe('fault switches', () => {
    it('failNext: 409, 429, 500 and 503 answer with GCS JSON errors and change nothing', async () => {
      const cases = [
        [409, 'conflict'],
        [429, 'rateLimitExceeded'],
        [500, 'backendError'],
        [503, 'backendError'],
      ] as const
      for (const [status, reason] of cases) {
        const name = freshName()
        server.failNext(1, status)
        const error = await gcsFailure(
          file(name).save('x', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } }),
        )
        assert.equal(error.code, status)
        assert.equal(reasonOf(error), reason)
        assert.equal(server.peek(BUCKET, name), undefined)
        assert.equal(server.requests.at(-1)?.fault, 'failed')
      }
    })

    it('the SDK retries a conditional write on 503 and 429 by itself, then it commits', async () => {
      const retrying = retryingClient()
      const name = freshName()
      server.failNext(1, 503)
      server.failNext(1, 429)
      await file(name, retrying).save('x', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } })
      assert.deepEqual(
        server.requests.map((r) => [r.method, r.status, r.fault]),
        [
          ['POST', 503, 'failed'],
          ['POST', 429, 'failed'],
          ['POST', 200, undefined],
        ],
      )
    })

    it('dropResponseAfterCommit on a multipart create: the SDK retries and reports 412 (the ambiguous case)', async () => {
      const retrying = retryingClient()
      const name = freshName()
      server.dropResponseAfterCommit(1, { method: 'POST', path: /^\/upload\// })
      const error = await gcsFailure(
        file(name, retrying).save('mine', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } }),
      )
      // Our own first attempt won: only re-reading the owner in the record can tell.
      assert.equal(error.code, 412)
      assert.equal(server.peek(BUCKET, name)?.body.toString(), 'mine')
      assert.deepEqual(
        server.requests.map((r) => [r.status, r.fault]),
        [
          [200, 'dropped'],
          [412, undefined],
        ],
      )
    })

    it('dropResponseAfterCommit on a resumable finalize: the SDK asks the session, which answers 200', async () => {
      const retrying = retryingClient()
      const name = freshName()
      server.dropResponseAfterCommit(1, { method: 'PUT', path: /^\/upload\// })
      await file(name, retrying).save('mine', { resumable: true, preconditionOpts: { ifGenerationMatch: 0 } })
      assert.equal(server.peek(BUCKET, name)?.body.toString(), 'mine')
      const [start, finalize, ...after] = server.requests.map((r) => [r.method, r.status, r.fault])
      assert.deepEqual(
        [start, finalize],
        [
          ['POST', 200, undefined],
          ['PUT', 200, 'dropped'],
        ],
      )
      // The SDK's status query and its resend both reach the finished session, which answers 200 again.
      assert.ok(after.length > 0)
      for (const request of after) assert.deepEqual(request, ['PUT', 200, undefined])
    })

    it('a delete that commits while a conditional save is in flight makes the save 412 (GCS has no 409 here)', async () => {
      const name = freshName()
      await file(name).save('owner-A', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } })
      const generation = await generationOf(name)
      const release = server.hold({ path: /^\/upload\// })
      const replace = awaitLater(
        gcsFailure(
          file(name).save('owner-B', {
            resumable: false,
            preconditionOpts: { ifGenerationMatch: Number(generation) },
          }),
        ),
      )
      await waitUntil(() => server.inFlight === 1, 'the conditional save to arrive')
      await file(name).delete()
      release()
      const error = await replace
      assert.equal(error.code, 412)
      assert.equal(server.peek(BUCKET, name), undefined)
    })

    it('hold keeps a request between arrival and commit: a later request is answered first', async () => {
      const slow = freshName()
      const fast = freshName()
      const release = server.hold({ path: /^\/upload\// })
      const pending = awaitLater(file(slow).save('slow', { resumable: false }))
      await waitUntil(() => server.inFlight === 1, 'the held upload to arrive')
      await file(fast)
        .setMetadata({})
        .catch(() => undefined)
      release()
      await pending
      assert.deepEqual(
        server.requests.map((r) => r.method),
        ['PATCH', 'POST'],
      )
    })

    it('lax mode ignores preconditions: G2 and G9 then fail (what doctor must catch)', async () => {
      server.lax(true)
      const name = freshName()
      const create = (body: string) =>
        file(name).save(body, { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } })
      await create('owner-A')
      await create('owner-B')
      assert.equal(await text(name), 'owner-B')
      server.delay(30, { path: /^\/upload\// })
      const results = await Promise.allSettled(Array.from({ length: 5 }, (_, i) => create(`o${i}`)))
      assert.equal(results.filter((r) => r.status === 'fulfilled').length, 5)
      server.clearFaults()
      assert.equal((await gcsFailure(create('owner-C'))).code, 412)
    })

    it('the optional per-object rate limit answers 429 rateLimitExceeded', async () => {
      server.settings.mutationIntervalMs = 60_000
      try {
        const name = freshName()
        await file(name).save('a', { resumable: false })
        const error = await gcsFailure(file(name).save('b', { resumable: false }))
        assert.equal(error.code, 429)
        assert.equal(reasonOf(error), 'rateLimitExceeded')
        await file(freshName()).save('other names are not limited', { resumable: false })
      } finally {
        server.settings.mutationIntervalMs = 0
      }
    })

    it('restart keeps the port, the objects and the generations; a stopped server refuses connections', async () => {
      const retrying = retryingClient()
      const name = freshName()
      await file(name).save('durable', { resumable: false, preconditionOpts: { ifGenerationMatch: 0 } })
      const generation = await generationOf(name)
      const port = server.port
      await server.restart()
      assert.equal(server.port, port)
      assert.equal((await file(name, retrying).download())[0].toString(), 'durable')
      await server.stop()
      await assert.rejects(file(name).download())
      await server.start()
      const [metadata] = await file(name, retrying).getMetadata()
      assert.equal(metadata.generation, generation.toString())
    })
  })
})
