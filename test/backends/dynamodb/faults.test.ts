/**
 * What DynamoDB's errors mean to the core, without a server: which ones waiting may help (the acquire
 * retries), which ones a transaction's refusal is (an answer, not a failure).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { cancellation, describeFailure } from '../../../src/backends/dynamodb/faults.js'

/** An error as the SDK throws it: a name, the HTTP status, and for a cancelled transaction its reasons. */
const sdkError = (name: string, status: number, more: Record<string, unknown> = {}) =>
  Object.assign(new Error(`${name} from the service`), {
    name,
    $metadata: { httpStatusCode: status },
    ...more,
  })

describe('dynamodb faults', () => {
  it('a transaction still in progress under the same token is retried, not reported', () => {
    // The SDK's own retry of a TransactWriteItems reached the service while the first try was being
    // applied: the transaction may land, and the service asks for a retry with backoff.
    const error = sdkError('TransactionInProgressException', 400)
    assert.equal(describeFailure(error).retryable, true)
    assert.equal(cancellation(error), undefined, 'no refusal either: the outcome is unknown')
  })

  it('a request the service will never take fails at once', () => {
    assert.equal(describeFailure(sdkError('ValidationException', 400)).retryable, false)
  })

  it('a transaction cancelled for conditions or another transaction is a refusal; for throttling, a failure', () => {
    const refused = sdkError('TransactionCanceledException', 400, {
      CancellationReasons: [
        { Code: 'ConditionalCheckFailed' },
        { Code: 'None' },
        { Code: 'TransactionConflict' },
      ],
    })
    assert.deepEqual(
      cancellation(refused)?.map(({ code }) => code),
      ['ConditionalCheckFailed', 'None', 'TransactionConflict'],
    )
    const throttled = sdkError('TransactionCanceledException', 400, {
      CancellationReasons: [{ Code: 'ThrottlingError' }, { Code: 'None' }],
    })
    assert.equal(cancellation(throttled), undefined)
    assert.equal(describeFailure(throttled).retryable, true)
  })
})
