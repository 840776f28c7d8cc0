/**
 * Bounded rounds for compare-and-swap writers: a round that lost the race (the state moved on between its
 * read and its write) reads again and retries at once, at most `rounds` times. No delay between rounds: a
 * lost race means another writer made progress, not that the store is failing. A failure (a thrown error)
 * ends the rounds at once; waiting after failures is the acquire loop's business (acquire-loop.ts).
 */

/**
 * Runs `round` until it returns something other than `undefined`, at most `rounds` times.
 * @throws what `round` throws, or `exhausted()` when every round lost
 */
export async function retryRounds<T>(
  rounds: number,
  round: () => Promise<T | undefined>,
  exhausted: () => Error,
): Promise<T> {
  for (let i = 0; i < rounds; i++) {
    const result = await round()
    if (result !== undefined) return result
  }
  throw exhausted()
}
