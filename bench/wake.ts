/**
 * The armed half of a wake-up, shared by the bench's hand-written floors: armed before the try it follows,
 * so that a notification between the try and the wait is not missed.
 */

/** `woken` resolves once `wake` is called. */
export function armed(): { woken: Promise<void>; wake: () => void } {
  let wake: () => void = () => {}
  const woken = new Promise<void>((resolve) => {
    wake = resolve
  })
  return { woken, wake }
}
