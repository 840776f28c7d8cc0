/**
 * The queue engine's grant rules (src/engines/queue/grants.ts): who is granted from the entries ahead of
 * ours, and which of them a waiter waits for.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { FIRST_IN_LINE, firstN } from '../../../src/engines/queue/grants.js'

describe('grant rules', () => {
  it('a mutex: granted with nobody ahead; else it waits for the entry just before its own', () => {
    assert.equal(FIRST_IN_LINE.looksBack, 1)
    assert.deepEqual(FIRST_IN_LINE.decide([]), { granted: true })
    assert.deepEqual(FIRST_IN_LINE.decide(['a']), { granted: false, waitFor: 'a' })
    assert.deepEqual(FIRST_IN_LINE.decide(['a', 'b']), { granted: false, waitFor: 'b' })
  })

  it('firstN(n): granted while fewer than n are ahead; else it waits for the n-th entry ahead', () => {
    const rule = firstN(3)
    assert.equal(rule.looksBack, 3, 'the adapter reads no more than the three newest ahead')
    assert.deepEqual(rule.decide(['a', 'b']), { granted: true })
    assert.deepEqual(rule.decide(['a', 'b', 'c']), { granted: false, waitFor: 'a' })
    assert.deepEqual(rule.decide(['x', 'a', 'b', 'c']), { granted: false, waitFor: 'a' })
  })

  it('firstN refuses a count that is not a whole number of at least one', () => {
    for (const n of [0, -1, 1.5, Number.NaN]) assert.throws(() => firstN(n), RangeError)
  })
})
