import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { readParams } from '../../src/core/url.js'
import { loadBackend, parseBackendUrl } from '../../src/schemes.js'

const SCHEMA = {
  fair: { type: 'bool', default: false, doc: 'a flag' },
  count: { type: 'int', min: 0, default: 0, doc: 'an integer' },
  wait: { type: 'duration', min: 100, doc: 'a duration' },
  mode: { type: 'enum', values: ['a', 'b'], doc: 'an enum' },
  name: { type: 'string', doc: 'a string' },
} as const

const read = (query: string) => readParams(new URL(`redis://user:secret@h:1/${query}`), SCHEMA)

describe('URL parameters read by schema', () => {
  it('reads each type, with defaults for what is absent', () => {
    assert.deepEqual(read(''), { fair: false, count: 0 })
    assert.deepEqual(read('?fair&count=3&wait=2s&mode=b&name=app:'), {
      fair: true,
      count: 3,
      wait: 2000,
      mode: 'b',
      name: 'app:',
    })
    assert.equal(read('?fair=false').fair, false)
  })

  it('refuses bad values, naming the parameter and the URL without its password', () => {
    assert.throws(
      () => read('?count=abc'),
      /`count` in redis:\/\/user:\*\*\*@h:1\/\?count=abc to be an integer/,
    )
    assert.throws(() => read('?count=-1'), /an integer of at least 0/)
    assert.throws(() => read('?count=1.5'), /an integer/)
    assert.throws(() => read('?fair=yes'), /`fair` .* to be true or false, got "yes"/)
    assert.throws(() => read('?mode=c'), /one of a, b, got "c"/)
    assert.throws(() => read('?wait=10ms'), /wait/)
    assert.throws(() => read('?fair=true&fair=false'), /`fair` once .* got it 2 times/)
    assert.throws(
      () => read('?fiar=true'),
      /Unknown parameter "fiar" .*did you mean "fair"\?.*Known: fair, count/,
    )
  })

  it('every backend refuses an unknown parameter, even one that takes none', async () => {
    for (const url of ['memory:x?foo=1', 'etcd://h:2379?foo=1', 'file:///tmp/x?fsnyc=false']) {
      await assert.rejects((async () => loadBackend(parseBackendUrl(url)))(), /Unknown parameter/, url)
    }
  })
})
