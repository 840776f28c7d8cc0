/**
 * The fence a guard compares: a lock's `fence`, a non-negative bigint below 2^63 (every store's fence
 * fits a signed 64-bit integer, and so does the column that keeps it). Checked once here so that each
 * guard compares exact integers: never a JavaScript number (exact only to 2^53), never a Lua number.
 */

/** The largest fence a guard accepts: a signed 64-bit integer's (SQL `bigint`, `BIGINT`). */
export const MAX_FENCE = 2n ** 63n - 1n

/** `fence` as its decimal digits, after checking it is a lock's fence; a TypeError names `where`. */
export function fenceDigits(fence: unknown, where: string): string {
  if (typeof fence !== 'bigint' || fence < 0n || fence > MAX_FENCE) {
    const shown = typeof fence === 'bigint' ? `${fence}n` : (JSON.stringify(fence) ?? String(fence))
    throw new TypeError(
      `Expected \`fence\` to be a lock's fence (a bigint from 0 to 2^63 - 1, lock.fence) ${where}, got ${shown} (${typeof fence})`,
    )
  }
  return fence.toString()
}
