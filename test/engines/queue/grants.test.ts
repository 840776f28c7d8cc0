/**
 * The queue engine's grant rules (src/engines/queue/grants.ts): who is granted from the entries ahead of
 * ours, and which of them a waiter waits for.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { FIRST_IN_LINE, firstN, permitsFit, permitsRule } from '../../../src/engines/queue/grants.js'

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

  it('permitsFit: the permits of every entry ahead plus ours, within the limit', () => {
    assert.equal(permitsFit([], 3, 3), true)
    assert.equal(permitsFit([1, 1], 1, 3), true)
    assert.equal(permitsFit([1, 1], 2, 3), false)
    assert.equal(permitsFit([], 4, 3), false, 'a request above the limit never fits')
  })

  it('permitsRule: granted when all fit; the first waiter waits for the line, a later one for the waiter ahead', () => {
    const rule = permitsRule(2)
    assert.equal(rule.looksBack, Number.POSITIVE_INFINITY, 'it counts the whole line ahead')
    const counted = (permits: number[], limit: number) => ({ permits, limit, line: 'line' })
    assert.deepEqual(rule.decide(['a'], counted([1], 3)), { granted: true })
    // a holds 2 of 3: ours (2) does not fit, and nothing ahead waits: any lease leaving may admit us.
    assert.deepEqual(rule.decide(['a'], counted([2], 3)), { granted: false, waitFor: 'line' })
    assert.deepEqual(rule.decide([], counted([], 1)), { granted: false, waitFor: 'line' })
    // b (2) waits behind a (2): none can be admitted before b, so we wait for b, not for the line.
    assert.deepEqual(rule.decide(['a', 'b'], counted([2, 2], 3)), { granted: false, waitFor: 'b' })
    assert.throws(() => rule.decide(['a']), TypeError, 'without counts from its adapter it cannot decide')
  })
})
