/**
 * HTTP requests this process sends, for the conditional-write stores (S3, GCS, DynamoDB): every SDK call
 * is an HTTP request (retries included), and Node publishes each one on the `http.client.request.start`
 * diagnostics channel, whichever SDK sends it. Scenarios run one adapter at a time in this process, and
 * the stores' servers do not send requests of their own here (the fakes answer in-process, DynamoDB Local
 * is another process), so a difference of two readings is the adapter's requests.
 */
import { subscribe } from 'node:diagnostics_channel'

let sent = 0
subscribe('http.client.request.start', () => {
  sent++
})

/** Requests sent so far by this process. */
export const httpRequests = (): number => sent
