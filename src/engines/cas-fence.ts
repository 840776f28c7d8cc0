/**
 * Where a `cas-lease` fence comes from, so that it outlives the record that carries it. A record can be
 * deleted behind fencelock's back (an S3 or GCS lifecycle rule, `aws s3 rm --recursive`, a DynamoDB item
 * deleted or its table made again); a counter kept only in the record would then start again at 1, below
 * fences already handed out. These stores keep nothing else a fence could lean on (no sequence; a per-prefix
 * high-water object would be one more write per grant, GCS takes about one write per second per object,
 * and a deletion of the prefix takes it too), but every answer they give carries the SERVER's clock: the
 * HTTP `Date` header, in whole seconds. The fence folds it in:
 *
 *   E(T) = T × 2^20, T the server's Unix second in the answer to the read that decided the grant;
 *   a grant on a record:  fence = max(previous + 1, E(T));
 *   a new record:         fence = E(T + 3).
 *
 * Why a new record's fence is above every earlier one of the key (the clock rate bound: fewer than 2^20
 * grants of one key in a second, far above what any of these stores takes on one record):
 * - A grant's fence is below E(T + 1) for the second T of its own read, or below E(T0 + 4) for a record
 *   whose creation read saw T0 and which has seen no grant whose E won since. Every write is conditioned
 *   on the version it read, so a grant always lands on the same record it read, never on one made again.
 * - A record made again after a deletion was decided by a read (second T2) served after that deletion,
 *   so after every earlier grant's read: T2 >= T - 1 (one second for the truncation of `Date` and the
 *   clocks of the store's front ends, which agree far closer than that). Its fence E(T2 + 3) is then at
 *   least E(T + 2), above E(T + 1).
 * - A create that arrives late (sent long after its read, while another record of the key was made,
 *   used and deleted in between) would carry an old T: a create whose answer shows more than a second
 *   after its read (`LATE_CREATE_S`) is written again at once, by a replace on its own version, with
 *   the fence of a record made at the second of that answer, before anyone is granted with it.
 * What is left (the README's guarantees say so): a record deleted behind fencelock's back (its own
 * retires wait for the rule below) less than about three seconds after its creation and made again
 * within those seconds may repeat the fences of the one deleted, since T0 and T2 can then be the same
 * second. Nothing shorter can be told apart on a one-second clock.
 *
 * E stays below 2^53 until the year 2242 (exact in a JSON number or a double) and a server second beyond
 * 2^40 is refused as a broken clock, so every fence stays far below 2^63 (a SQL `bigint`). Records written
 * by versions of fencelock that counted from 1 keep working: their next grant jumps to E(T), forward.
 * Without a `Date` in the answers (a store that sends none) the fence is the record's counter alone, as
 * those versions did, and `doctor` says so.
 *
 * Retiring a released record (cas-retire.ts): fencelock deletes it, conditioned on the version it last
 * wrote, once its fence F is below E(S + 1), S any server second shown by an answer received before the
 * delete is sent (`retirable`). Why every later record of the key starts above F:
 * - A record made after the delete was decided by a read served after it, so after the request that
 *   showed S: its second T2 >= S - 1 (as above), its fence E(T2 + 3) >= E(S + 2) > F.
 * - A create decided by a read BEFORE the deleted record existed, which lands only after the delete (its
 *   condition "no record" holds again then): its answer shows at least S - 1. If that is over a second
 *   after its read, it is made again at the answer's second (above): E(S + 2) at least. If not, its read
 *   saw T2 >= S - 2, and its fence E(T2 + 3) >= E(S + 1) > F.
 * - A write conditioned on the deleted record's version can never land (versions never come back).
 * So a record whose last grant was on an existing record (F < E(T + 1), T that grant's read) can go at
 * once, while a record made new (F = E(T0 + 3) + grants since) waits until the store's clock shows
 * T0 + 3: about three seconds after its creation. Without a `Date` in the answers nothing is retired: a
 * counter kept only in the record would start again at 1.
 */
import { BackendUnavailableError } from '../core/errors.js'

/** Grants of one key per second that the epoch leaves room for (2^20: no store here takes 1,000). */
export const GRANTS_PER_SECOND_SHIFT = 20n
/** A new record's epoch is this many seconds past its read (see above). */
export const NEW_RECORD_LEAD_S = 3
/** A create whose answer came more than this many seconds after its read is written again (see above). */
export const LATE_CREATE_S = 1
/** Server seconds beyond this are a broken clock (year 36812): refused rather than turned into a fence. */
const MAX_SERVER_SECONDS = 2 ** 40

/** The server's clock as one answer showed it, noted by a driver: whole seconds since 1970 (UTC). */
export interface ServerClock {
  seconds?: number | undefined
}

/** The whole seconds of an HTTP `Date` header (RFC 9110 IMF-fixdate), or undefined when it is absent or unreadable. */
export function httpDateSeconds(header: string | null | undefined): number | undefined {
  if (!header) return undefined
  const ms = Date.parse(header)
  return Number.isFinite(ms) ? Math.floor(ms / 1000) : undefined
}

/** Notes `seconds` in `clock`, when both are there. */
export function noteClock(clock: ServerClock | undefined, seconds: number | undefined): void {
  if (clock && seconds !== undefined) clock.seconds = seconds
}

/** E(T): the least fence a grant decided at server second `seconds` takes. */
export function epochFence(seconds: number, key: string, backend: string): bigint {
  if (!Number.isSafeInteger(seconds) || seconds < 0 || seconds > MAX_SERVER_SECONDS) {
    throw new BackendUnavailableError(
      `The server's clock at ${backend} answered ${String(seconds)} (seconds since 1970) for lock ` +
        `${JSON.stringify(key)}: no fence can be made from it; fix the server's clock`,
      { key, backend, retryable: false },
    )
  }
  return BigInt(seconds) << GRANTS_PER_SECOND_SHIFT
}

/** The fence of a grant on an existing record whose fence is `previous`, decided at server second `seconds`. */
export function grantFence(
  previous: bigint,
  seconds: number | undefined,
  key: string,
  backend: string,
): bigint {
  const next = previous + 1n
  if (seconds === undefined) return next
  const epoch = epochFence(seconds, key, backend)
  return epoch > next ? epoch : next
}

/** The fence of a new record, decided by a read at server second `seconds` that found none. */
export function newRecordFence(seconds: number | undefined, key: string, backend: string): bigint {
  return seconds === undefined ? 1n : epochFence(seconds + NEW_RECORD_LEAD_S, key, backend)
}

/** Whether a record whose fence is `fence` may be deleted by a request sent after an answer showing `seconds` (above). */
export function retirable(fence: bigint, seconds: number | undefined): boolean {
  return seconds !== undefined && fence < BigInt(seconds + 1) << GRANTS_PER_SECOND_SHIFT
}

/** Whether a create decided at `readSeconds` and answered at `answeredSeconds` may have landed late. */
export function landedLate(readSeconds: number | undefined, answeredSeconds: number | undefined): boolean {
  return (
    readSeconds !== undefined &&
    answeredSeconds !== undefined &&
    answeredSeconds > readSeconds + LATE_CREATE_S
  )
}

/**
 * Duck type of an AWS SDK v3 command (`@aws-sdk/client-s3`, `@aws-sdk/client-dynamodb`): a middleware
 * added to the command's own stack sees the raw HTTP response of each attempt, which the SDK's output
 * does not carry. The user's client is left untouched.
 */
interface AwsCommand {
  readonly middlewareStack: {
    add(
      middleware: (next: (args: unknown) => Promise<unknown>) => (args: unknown) => Promise<unknown>,
      options: { step: 'finalizeRequest'; priority: 'low'; name: string },
    ): void
  }
}

type HeadersOf = { headers?: Record<string, string | undefined> } | undefined

/** `command`, noting in `clock` the `Date` of the answer to its last attempt (also of an error). */
export function withServerClock<C>(command: C, clock: ServerClock | undefined): C {
  if (!clock)
    return command
    // `finalizeRequest`, low priority: inside the SDK's retries, around the deserializer.
  ;(command as unknown as AwsCommand).middlewareStack.add(
    (next) => async (args) => {
      try {
        const out = (await next(args)) as { response?: HeadersOf }
        noteClock(clock, httpDateSeconds(out.response?.headers?.date))
        return out
      } catch (error) {
        noteClock(clock, httpDateSeconds((error as { $response?: HeadersOf })?.$response?.headers?.date))
        throw error
      }
    },
    { step: 'finalizeRequest', priority: 'low', name: 'fencelockServerClock' },
  )
  return command
}
