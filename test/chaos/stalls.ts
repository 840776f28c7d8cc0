/**
 * Notices when this process could not run: a timer every `everyMs` that fires more than `thresholdMs` late
 * means the event loop was blocked or the process got no CPU (a loaded machine) for about that long. Chaos
 * workers and the harness report these as `stall` events (history.ts), which the checker treats as the
 * pauses they are. Returns the function that stops watching.
 */
export function watchStalls(onStall: (ms: number) => void, everyMs = 20, thresholdMs = 100): () => void {
  let last = performance.now()
  const timer = setInterval(() => {
    const t = performance.now()
    const late = t - last - everyMs
    last = t
    if (late > thresholdMs) onStall(late)
  }, everyMs)
  timer.unref()
  return () => clearInterval(timer)
}
