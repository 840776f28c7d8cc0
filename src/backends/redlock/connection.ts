/** Waiting for a node's ioredis connection (the URL's clients never queue a command while offline). */
import type { Redis } from 'ioredis'
import { raceSignal } from '../../core/abort.js'

/** Resolves once the client's connection is ready (fencelock's node clients do not queue commands offline). */
export function connected(client: Redis): Promise<void> {
  if (client.status === 'ready') return Promise.resolve()
  if (client.status === 'wait') client.connect().catch(() => {})
  if (client.status === 'end') {
    return Promise.reject(new Error('the connection was closed (client.quit() or disconnect())'))
  }
  return new Promise((resolve) => client.once('ready', () => resolve()))
}

/** Resolves once the client is connected, or rejects with the first connection error (for `doctor`). */
export function reachable(client: Redis, signal: AbortSignal): Promise<void> {
  if (client.status === 'ready') return Promise.resolve()
  if (client.status === 'end') {
    return Promise.reject(new Error('the connection was closed (client.quit() or disconnect())'))
  }
  if (client.status === 'wait') client.connect().catch(() => {})
  let detach = () => {}
  const connecting = new Promise<void>((resolve, reject) => {
    const onReady = () => resolve()
    const onError = (error: Error) => reject(error)
    client.once('ready', onReady)
    client.once('error', onError)
    detach = () => {
      client.off('ready', onReady)
      client.off('error', onError)
    }
  })
  return raceSignal(connecting, signal).finally(() => detach())
}
