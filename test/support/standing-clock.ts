/**
 * A wall clock of a test's own for the file backend's epochs (its `clock` and `sleep` hooks): it stands
 * still, and moves on only as far as a bump waits for it (epochs are used only once the clock has passed
 * them), so epochs come out as plain counters from `startMs`, with no real waiting.
 */
export function standingClock(startMs: number): {
  clock: () => number
  sleep: (ms: number) => Promise<void>
} {
  let now = startMs
  return {
    clock: () => now,
    sleep: async (ms) => {
      now += ms
    },
  }
}
