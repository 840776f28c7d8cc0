import assert from 'node:assert/strict'

/** One grant as a test saw it: its fence, and when it was held (one process, one monotonic clock). */
export interface Hold {
  readonly fence: bigint
  readonly start: number
  readonly end: number
}

/**
 * The two guarantees across successive holders: no two holds overlap, and each fence is above the one
 * before. Sorts `holds` by start.
 */
export function assertSuccessiveHolds(holds: Hold[]): void {
  holds.sort((a, b) => a.start - b.start)
  for (let i = 1; i < holds.length; i++) {
    const [a, b] = [holds[i - 1]!, holds[i]!]
    assert.ok(a.end <= b.start, `holds ${i - 1} and ${i} overlap (fences ${a.fence}, ${b.fence})`)
    assert.ok(b.fence > a.fence, `fence ${b.fence} of holder ${i} is not above ${a.fence} of the one before`)
  }
}
