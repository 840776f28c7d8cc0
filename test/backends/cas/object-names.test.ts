/**
 * Object names of lock keys, shared by the S3 and GCS layouts (src/engines/cas/objects.ts): plain keys kept
 * as they are, everything else hashed, names differing in case kept apart, and prefixes made from URL paths.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { gcsBackend } from '../../../src/backends/gcs/index.js'
import { lockObjectName } from '../../../src/backends/gcs/layout.js'
import { s3Backend } from '../../../src/backends/s3/index.js'
import { DEFAULT_PREFIX, lockObjectKey } from '../../../src/backends/s3/layout.js'
import {
  keyOfObject,
  listedNamePrefixes,
  MAX_PREFIX_BYTES,
  objectNameOf,
  objectPrefix,
} from '../../../src/engines/cas/objects.js'
import { encodeRecord } from '../../../src/engines/cas/record.js'

it('keeps plain keys, case included, under the prefix', () => {
  assert.equal(lockObjectKey('orders/42'), `${DEFAULT_PREFIX}orders/42`)
  assert.equal(lockObjectKey('Job-A.1_x', 'app/'), 'app/Job-A.1_x')
  assert.notEqual(objectNameOf('Job'), objectNameOf('job'))
  assert.equal(lockObjectName('orders/42'), lockObjectKey('orders/42'), 'S3 and GCS name a lock alike')
})

it('hashes keys with other characters, empty segments, dot segments or too many bytes', () => {
  const hashed = [
    'a b',
    'ä',
    '/a',
    'a/',
    'a//b',
    '.',
    '..',
    'a/../b',
    './a',
    '~x',
    'a?b',
    'x'.repeat(257),
    '',
  ]
  for (const key of hashed) {
    assert.match(objectNameOf(key), /^~[0-9a-f]{64}$/, JSON.stringify(key))
  }
  assert.equal(new Set(hashed.map(objectNameOf)).size, hashed.length, 'each key its own name')
  assert.notEqual(objectNameOf('Ä'), objectNameOf('ä'), 'hashed names keep case apart too')
  // Dots inside a segment are plain: only a segment that is exactly '.' or '..' is not.
  assert.equal(objectNameOf('a..b/.c/d.'), 'a..b/.c/d.')
  assert.equal(objectNameOf('x'.repeat(256)), 'x'.repeat(256))
})

it('makes a prefix from a URL path or an option', () => {
  assert.equal(objectPrefix(undefined, 'fencelock/'), 'fencelock/')
  assert.equal(objectPrefix('/', 'fencelock/'), 'fencelock/')
  assert.equal(objectPrefix('/app', 'fencelock/'), 'app/')
  assert.equal(objectPrefix('/app/locks/', 'fencelock/'), 'app/locks/')
  assert.equal(objectPrefix('app', 'fencelock/'), 'app/')
  assert.throws(() => objectPrefix('p'.repeat(MAX_PREFIX_BYTES + 1), 'fencelock/'), /at most/)
})

it('refuses a prefix with a "." or ".." segment, as in keys, on S3 and GCS', () => {
  const refused = (error: unknown) => {
    assert.ok(error instanceof TypeError, `expected a TypeError, got ${error}`)
    assert.match(error.message, /without "\." or "\.\." segments/)
    return true
  }
  // Stand-ins: building a backend sends nothing.
  const s3 = { send: () => assert.fail('no request') } as never
  const gcs = { bucket: () => assert.fail('no request') } as never
  for (const prefix of ['../x', 'app/../x/', './app', 'app/.', 'a/./b/', '..']) {
    assert.throws(() => objectPrefix(prefix, 'fencelock/'), refused, prefix)
    assert.throws(() => s3Backend({ client: s3, bucket: 'b', prefix }), refused, prefix)
    assert.throws(() => gcsBackend({ client: gcs, bucket: 'b', prefix }), refused, prefix)
  }
  // Dots inside a segment are plain, as in keys.
  for (const prefix of ['app.v2/', '...x/', 'a/.hidden/', 'x..y'])
    assert.doesNotThrow(() => objectPrefix(prefix, 'fencelock/'), prefix)
})

it('lists the names a key prefix can have: plain ones under it, and every hashed one', () => {
  assert.deepEqual(listedNamePrefixes(''), [''])
  assert.deepEqual(listedNamePrefixes('orders/'), ['orders/', '~'])
  // No plain key starts with a space, a non-ASCII letter or '~': only hashed names can match.
  for (const prefix of ['a b', 'ä', '~x', 'a?']) assert.deepEqual(listedNamePrefixes(prefix), ['~'], prefix)
})

it("tells a listed object's key by its plain name, or by the key its record carries under a hashed one", () => {
  const record = (key?: string) =>
    encodeRecord({ owner: 'o', fence: 1n, leaseMs: 1000, state: 'held', nonce: 'n', key })
  assert.equal(keyOfObject('orders/42', 'anything'), 'orders/42')
  assert.equal(keyOfObject(objectNameOf('a b/ä'), record('a b/ä')), 'a b/ä')
  // A record copied under another hashed name, one of an older version without its key, an odd name.
  assert.equal(keyOfObject(objectNameOf('x y'), record('a b/ä')), undefined)
  assert.equal(keyOfObject(objectNameOf('a b/ä'), record()), undefined)
  assert.equal(keyOfObject('a b', record('a b')), undefined, 'a plain-looking name that is not a key of ours')
})
