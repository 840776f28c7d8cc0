/**
 * Where an election lives on Redis: its key and channel names, in one place (the backend and the tests use
 * them; nobody copies the format).
 *
 * Every name starts `<prefix>!election{<tag>}`. A lock's names all start `<prefix>{` (../keys.ts), so no lock
 * name, escaped or not, reaches an election's keys, and `list`'s SCAN of lock keys (`<prefix>{*}`) passes
 * them by: a lock `x` and an election `x` are independent. Every key of one election shares the hash tag,
 * so its scripts touch one Cluster slot.
 */
import { DEFAULT_PREFIX, taggedName } from '../keys.js'

/** The keys and channels of one election. */
export interface RedisElectionKeys {
  /** The leader's owner id, with its lease as the PX expiry. */
  readonly leader: string
  /** The last term minted (MINT, as a lock's fence), kept an hour after it. */
  readonly term: string
  /** "<owner> <value>": the leader's value, written and expired with `leader`. */
  readonly value: string
  /** "<owner> <description>": the leader's holder description, for `inspect`. */
  readonly holder: string
  /** A resign or an abandon publishes here: it wakes one waiting candidate per client. */
  readonly released: string
  /** Every change of who leads or of the value (grant, proclaim, resign) publishes here: it wakes observers. */
  readonly changed: string
}

/** The keys of the election named `name` under `prefix`. */
export function redisElectionKeys(name: string, prefix: string = DEFAULT_PREFIX): RedisElectionKeys {
  const { name: leader } = taggedName(name, `${prefix}!election`)
  return {
    leader,
    term: `${leader}:term`,
    value: `${leader}:value`,
    holder: `${leader}:holder`,
    released: `${leader}:released`,
    changed: `${leader}:changed`,
  }
}
