/**
 * What etcd's errors mean to the core, without a server: the words a caller reads, and whether waiting
 * may help (the acquire retries) or the request can never succeed (it fails at once).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { describeFailure } from '../../../src/backends/etcd/faults.js'

describe('etcd failure words', () => {
  it('a transaction above --max-txn-ops fails at once and says how to split the set', () => {
    // gRPC's words for etcd's ErrGRPCTooManyOps, as etcd3 passes them on.
    const failure = describeFailure(
      new Error('3 INVALID_ARGUMENT: etcdserver: too many operations in txn request'),
    )
    assert.equal(failure.retryable, false, 'no retry makes the transaction smaller')
    assert.match(failure.text, /--max-txn-ops/)
    assert.match(failure.text, /split the set/)
  })

  it('an overloaded server is waited for', () => {
    assert.equal(describeFailure(new Error('etcdserver: too many requests')).retryable, true)
  })
})
