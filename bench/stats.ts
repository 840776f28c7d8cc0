/** Small statistics for benchmarks: percentiles over samples in ms. */
export function percentile(samples: number[], p: number): number {
  if (samples.length === 0) return Number.NaN
  const sorted = [...samples].sort((a, b) => a - b)
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))
  return sorted[index]!
}

export const fmt = (n: number, digits = 3) => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a')
