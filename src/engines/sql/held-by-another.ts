/**
 * The refusal an adapter's `acquireAll` throws inside its transaction to roll it back (adapter.ts): a key
 * of the set is held by another owner. Caught around the transaction and turned into the refusal result;
 * never seen by the engine or the user.
 */
export class HeldByAnother extends Error {
  constructor(
    /** The key found held. */
    readonly key: string,
    /** Its holder's lease left (ms, server-measured), when the statement told it. */
    readonly remainingMs: number | undefined,
  ) {
    super(`${key} is held by another owner`)
  }
}
