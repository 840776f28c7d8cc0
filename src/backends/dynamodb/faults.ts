/**
 * How a DynamoDB call fails, in words, and whether waiting could help. The SDK's errors carry the service's
 * error name (`ThrottlingException`) and the HTTP status (`$metadata.httpStatusCode`); a network failure or
 * a timeout carries neither. We branch on names, never on classes: the user's client may come from another
 * copy of `@aws-sdk/client-dynamodb` than the one fencelock would load.
 */
import { causeText, describeNetworkError } from '../../core/errors.js'

/** What the SDK's errors look like to us (every field optional: a network error has none of them). */
interface SdkError {
  readonly name?: string
  readonly message?: string
  readonly $metadata?: { readonly httpStatusCode?: number }
  readonly $retryable?: unknown
  /** The item as it is, on a ConditionalCheckFailedException asked for with `ALL_OLD`. */
  readonly Item?: unknown
  /** Why a TransactWriteItems was cancelled, one entry per action in its order (`Code` 'None': not this one). */
  readonly CancellationReasons?: readonly { readonly Code?: string; readonly Item?: unknown }[]
}

/** The service said no to our condition: a refusal, never a failure. */
export const isConditionFailed = (error: unknown): error is SdkError =>
  (error as SdkError | undefined)?.name === 'ConditionalCheckFailedException'

/**
 * Why a transaction was cancelled, one code per action ('None' for an action that was not the cause),
 * when it was refused for our conditions or for another transaction on one of its items only: a
 * refusal, never a failure. Undefined for any other error (throttling or a failing server among the
 * reasons included: those are failures, which waiting may help).
 */
export function cancellation(
  error: unknown,
): readonly { readonly code: string; readonly item: unknown }[] | undefined {
  const e = error as SdkError | undefined
  if (e?.name !== 'TransactionCanceledException' || !e.CancellationReasons) return undefined
  const reasons = e.CancellationReasons.map((r) => ({ code: r.Code ?? 'None', item: r.Item }))
  return reasons.every(({ code }) => REFUSING.has(code)) ? reasons : undefined
}

/** The cancellation reasons that are a refusal: a condition failed, another transaction was on an item. */
const REFUSING = new Set(['None', 'ConditionalCheckFailed', 'TransactionConflict'])

/** The table does not exist (or is not ACTIVE yet, or is in another region or account). */
export const isTableMissing = (error: unknown): boolean =>
  (error as SdkError | undefined)?.name === 'ResourceNotFoundException'

/** Errors of the service that end by themselves: throttling, a busy partition, a failing server. */
const PASSING = new Set([
  'ThrottlingException',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'InternalServerError',
  'ServiceUnavailable',
  'TransactionConflictException',
  // The SDK's own retry of a transaction met the first try still being applied (same token): it may land.
  'TransactionInProgressException',
])

/** A transaction cancelled for throttling or the service's own trouble (its reasons say so per action). */
const passingCancel = (e: SdkError): boolean =>
  e.name === 'TransactionCanceledException' &&
  (e.CancellationReasons ?? []).some(
    ({ Code }) =>
      Code === 'ThrottlingError' ||
      Code === 'ProvisionedThroughputExceeded' ||
      Code === 'TransactionConflict',
  )

/** Errors that need someone to change something (credentials, region, a setting): no retry helps. */
const SETTING = new Set(['CredentialsProviderError', 'TokenProviderError'])

/** The error in one line, and whether waiting could help. */
export function describeFailure(error: unknown): { text: string; retryable: boolean } {
  const e = (error ?? {}) as SdkError
  const status = e.$metadata?.httpStatusCode
  const name = e.name ?? 'Error'
  // No status: no answer came; say why in words where we can ("connection refused at …").
  const reason = (status === undefined ? describeNetworkError(error) : undefined) ?? causeText(error)
  const text = `${name}${status ? ` (HTTP ${status})` : ''}: ${reason}`
  if (PASSING.has(name) || e.$retryable || passingCancel(e)) return { text, retryable: true }
  if (SETTING.has(name) || /region is missing/i.test(e.message ?? '')) return { text, retryable: false }
  // No status: the request never got an answer (refused, reset, timed out). 4xx: the request or its
  // credentials are wrong (AccessDenied, UnrecognizedClient, Validation, a missing table), which stays so.
  if (status === undefined || status === 429 || status >= 500) return { text, retryable: true }
  return { text, retryable: false }
}
