import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { parseDuration } from '../../src/index.js'

describe('parseDuration', () => {
  const accepted: [unknown, number][] = [
    [0, 0],
    ['0', 0],
    [250, 250],
    ['250ms', 250],
    ['15s', 15_000],
    ['2m', 120_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['0.5d', 43_200_000],
    ['1.5s', 1500],
    [' 15s ', 15_000],
  ]
  for (const [input, ms] of accepted) {
    it(`accepts ${JSON.stringify(input)} as ${ms} ms`, () => {
      assert.equal(parseDuration('ttl', input), ms)
    })
  }

  const rejected: [string, unknown, string][] = [
    ['a negative number', -1, '`-1` (number)'],
    ['NaN', Number.NaN, '`NaN` (number)'],
    ['Infinity unless allowed', Number.POSITIVE_INFINITY, '`Infinity` (number)'],
    ['an empty string', '', '"" (string)'],
    ['an unknown unit', '5 days', '"5 days" (string)'],
    ['a bad suffix', '10x', '"10x" (string)'],
    ['a space between number and unit', '10 s', '"10 s" (string)'],
    ['a space before ms', '250 ms', '"250 ms" (string)'],
    ['a bare number in a string (ms? s?)', '250', '"250" (string)'],
    ['a negative string', '-5s', '"-5s" (string)'],
    ['null', null, 'null'],
    ['undefined', undefined, '`undefined` (undefined)'],
    ['an object', { ms: 5 }, '[object Object] (object)'],
    ['an array', [5], '[object Array] (object)'],
    ['a bigint', 5n, '5n (bigint)'],
  ]
  for (const [what, input, received] of rejected) {
    it(`rejects ${what}, naming the option, the expected form and the value`, () => {
      assert.throws(
        () => parseDuration('ttl', input),
        (error: unknown) => {
          assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
          assert.match(error.message, /`ttl`/)
          assert.match(error.message, /'250ms'/, 'names the expected form')
          assert.ok(error.message.includes(received), `"${error.message}" should include ${received}`)
          return true
        },
      )
    })
  }

  it('accepts Infinity only when allowed', () => {
    assert.equal(
      parseDuration('timeout', Number.POSITIVE_INFINITY, { allowInfinity: true }),
      Number.POSITIVE_INFINITY,
    )
    assert.throws(
      () => parseDuration('timeout', Number.NEGATIVE_INFINITY, { allowInfinity: true }),
      TypeError,
    )
  })

  it('enforces a minimum and says so', () => {
    assert.equal(parseDuration('ttl', 10, { min: 10 }), 10)
    assert.throws(() => parseDuration('ttl', '9ms', { min: 10 }), /`ttl`.*>= 10 ms.*"9ms" \(string\)/)
  })

  it('names whichever option it parses', () => {
    assert.throws(() => parseDuration('timeout', 'soon'), /`timeout`/)
  })
})
