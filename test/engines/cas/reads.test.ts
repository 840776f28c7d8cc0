/**
 * Shared reads of the cas-lease engine (src/engines/cas/reads.ts): callers of one key share a read in
 * flight only when it was sent late enough for them, a read that came too early for a caller is followed
 * by one more for all such callers, and a read is aborted only when every caller has left.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { now } from '../../../src/core/clock.js'
import { SharedReads } from '../../../src/engines/cas/reads.js'
import { awaitLater } from '../../support/later.js'
import { waitUntil } from '../../support/wait.js'

/** A `send` whose reads the test answers one by one, in order. */
function controlled() {
  const sent: Array<{
    readonly key: string
    readonly signal: AbortSignal
    answer(value: string): void
  }> = []
  const reads = new SharedReads<string>(
    (key, signal, clock) =>
      new Promise<string>((resolve, reject) => {
        clock.seconds = 1000 + sent.length
        signal.addEventListener('abort', () => reject(signal.reason), { once: true })
        sent.push({ key, signal, answer: resolve })
      }),
  )
  return { reads, sent }
}

const open = () => new AbortController().signal

describe('cas-reads: one read per key serves every caller it can', () => {
  it('callers that may use any read share the one in flight; other keys get their own', async () => {
    const { reads, sent } = controlled()
    const many = Array.from({ length: 100 }, () =>
      awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY)),
    )
    const other = awaitLater(reads.read('j', open(), Number.NEGATIVE_INFINITY))
    assert.deepEqual(
      sent.map((s) => s.key),
      ['k', 'j'],
    )
    sent[0]!.answer('v1')
    sent[1]!.answer('w1')
    for (const answer of await Promise.all(many)) assert.deepEqual(answer, { value: 'v1', seconds: 1000 })
    assert.equal((await other).value, 'w1')
    assert.equal(reads.inFlight, 0)
  })

  it('a caller that needs a read sent after it came waits for the next one, shared by all such callers', async () => {
    const { reads, sent } = controlled()
    const early = awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY))
    // Came after that read was sent: it may have been served before a change these callers must see.
    const late = Array.from({ length: 50 }, () => awaitLater(reads.read('k', open(), now())))
    assert.equal(sent.length, 1, 'the next read waits for the one in flight')
    sent[0]!.answer('before')
    assert.equal((await early).value, 'before')
    await waitUntil(() => sent.length === 2, 'one more read for every late caller')
    // A caller that may use any read joins the one now in flight.
    const any = awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY))
    sent[1]!.answer('after')
    for (const answer of await Promise.all(late)) assert.equal(answer.value, 'after')
    assert.equal((await any).value, 'after')
    assert.equal(sent.length, 2)
  })

  it('a caller that gives up leaves the read to the others; the last one to leave aborts it', async () => {
    const { reads, sent } = controlled()
    const short = new AbortController()
    const long = new AbortController()
    const first = awaitLater(reads.read('k', short.signal, Number.NEGATIVE_INFINITY))
    const second = awaitLater(reads.read('k', long.signal, Number.NEGATIVE_INFINITY))
    short.abort(new Error('short deadline'))
    await assert.rejects(first, /short deadline/)
    assert.equal(sent[0]!.signal.aborted, false, 'still needed by the second caller')
    sent[0]!.answer('v')
    assert.equal((await second).value, 'v')

    const alone = new AbortController()
    const third = awaitLater(reads.read('k', alone.signal, Number.NEGATIVE_INFINITY))
    alone.abort(new Error('gone'))
    await assert.rejects(third, /gone/)
    assert.equal(sent[1]!.signal.aborted, true, 'nobody needs it any more')
    // A new caller gets a read of its own, not the aborted one.
    const fourth = awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY))
    await waitUntil(() => sent.length === 3, 'a read of its own')
    sent[2]!.answer('w')
    assert.equal((await fourth).value, 'w')
  })

  it('a read that fails fails every caller that joined it; the next caller reads again', async () => {
    const sent: Array<(error: Error) => void> = []
    const reads = new SharedReads<string>(() => new Promise<string>((_, reject) => sent.push(reject)))
    const a = awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY))
    const b = awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY))
    sent[0]!(new Error('503'))
    await assert.rejects(a, /503/)
    await assert.rejects(b, /503/)
    const c = awaitLater(reads.read('k', open(), Number.NEGATIVE_INFINITY))
    await waitUntil(() => sent.length === 2, 'a read of its own')
    sent[1]!(new Error('again'))
    await assert.rejects(c, /again/)
  })
})
