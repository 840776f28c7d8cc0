/**
 * Where a `cas-lease` fence comes from, so that it outlives the record that carries it. A record can be
 * deleted at any moment: by fencelock once released (retire.ts), by a lifecycle rule, by an operator
 * (`aws s3 rm --recursive`, a DynamoDB table made again). These stores keep nothing else a fence could
 * lean on, but every answer carries the SERVER's clock: the HTTP `Date`, in whole seconds. So:
 *
 *   E(T) = T × 2^20; a fence f is SETTLED at server second S when f < E(S + 1).
 *   A fence is handed to a holder only by a write sent after an answer (any request's) showing an S at
 *   which it is settled, and conditioned on the record's version, so it lands before any delete of it.
 *   - a grant on a record: f = max(previous + 1, E(T)), T the second of the read that decided it;
 *     settled at T unless the record is younger than its fence (then the attempt comes back later);
 *   - a new record (a create, after a read at T that found none) is NOT a grant: it is written marked
 *     `fresh` with E(T + 2); a later attempt of its creator, once an answer shows a second at which
 *     F = max(E(T + 2), E(Tc + 2)) is settled (Tc: the create's answer), replaces that version of it
 *     with F, unmarked: that write is the grant. Whoever else takes a record still marked fresh (an
 *     abandoned one, or one held past its lease) does the same with F = max(previous + 1, E(T + 2)).
 *
 * Why a record R2 made after a record R1 of the key was deleted starts above every fence f granted on
 * R1 (one second of slack: an answer served after another shows at least that one's second - 1, for the
 * truncation of `Date` and the clocks of the store's front ends, which agree far closer than that). The
 * grant of f was settled at an S with f < E(S + 1) by an answer before its write, which landed on R1
 * before R1's delete, so before R2's create landed:
 * - R2's read came after that delete: T >= S - 1, and R2's fences are at least E(T + 2) >= E(S + 1) > f.
 * - R2's read came before R1 existed (a create in flight all through R1's life): its answer came after
 *   the delete, Tc >= S - 1, and R2's first grant is at least E(Tc + 2) > f. If the creator never heard
 *   Tc (a lost reply), R2 is still marked fresh, and whoever grants on it next lifts the fence to
 *   E(T + 2) from a read made after it landed: above f likewise.
 * Within a record every version's fence is at least the one before it, +1 with each grant. So a delete
 * is safe at ANY age of the record: nothing depends on when it happens, or on who sends it. A record
 * deleted and made again within the same second (the case no fence rule can tell apart on a
 * one-second clock) costs its creator the wait, never a repeated fence. What it costs: a grant on a
 * new record waits for the store's clock to tick twice (1 to 2 s) and sends 1 R + 1 W more; a grant on
 * an existing one is 1 R + 1 W as before. Never a client's clock: only the store's, and the waiting
 * client's own monotonic clock to know when to look again.
 *
 * E stays below 2^53 until the year 2242 (exact in a JSON number or a double) and a server second beyond
 * 2^40 is refused as a broken clock, so every fence stays far below 2^63 (a SQL `bigint`). Records written
 * by versions of fencelock that counted from 1 keep working: their next grant jumps to E(T), forward.
 * Without a `Date` in the answers (a store that sends none) the fence is the record's counter alone, a new
 * record is granted at once, nothing is retired, and `doctor` says so.
 */
import { BackendUnavailableError } from '../../core/errors.js'

/** Grants of one key per second that the epoch leaves room for (2^20: no store here takes 1,000). */
export const GRANTS_PER_SECOND_SHIFT = 20n
/** A new record's fence is the epoch of this many seconds past its read (see above). */
export const NEW_RECORD_LEAD_S = 2
/** Server seconds beyond this are a broken clock (year 36812): refused rather than turned into a fence. */
const MAX_SERVER_SECONDS = 2 ** 40

/** The server's clock as one answer showed it, noted by an adapter: whole seconds since 1970 (UTC). */
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

/** The fence of a new record, decided by an answer at server second `seconds` (its read, or its create's answer). */
export function newRecordFence(seconds: number | undefined, key: string, backend: string): bigint {
  return seconds === undefined ? 1n : epochFence(seconds + NEW_RECORD_LEAD_S, key, backend)
}

/** The fence of a grant on a record still marked fresh, decided at `seconds`: lifted as a new record's. */
export function freshGrantFence(
  previous: bigint,
  seconds: number | undefined,
  key: string,
  backend: string,
): bigint {
  const next = previous + 1n
  const lifted = newRecordFence(seconds, key, backend)
  return seconds !== undefined && lifted > next ? lifted : next
}

/** Whether `fence` is settled at server second `seconds` (above); without a server clock, always. */
export function settled(fence: bigint, seconds: number | undefined): boolean {
  return seconds === undefined || fence < BigInt(seconds + 1) << GRANTS_PER_SECOND_SHIFT
}

/** The first server second at which `fence` is settled. */
export function settlesAt(fence: bigint): number {
  return Number(fence >> GRANTS_PER_SECOND_SHIFT)
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
