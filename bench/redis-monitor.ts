/**
 * The requests a Redis server receives, seen with MONITOR over a plain socket.
 *
 * Not ioredis's `monitor()`: it enters its monitoring state one promise turn after MONITOR's reply, so a
 * request line that arrives in the same read as that reply finds no command waiting, and ioredis throws
 * "Command queue state error" as an unhandled 'error' event, ending the bench (it did, whenever another
 * client spoke at that moment). Here every line after MONITOR's +OK is a request.
 */
import { connect } from 'node:net'

/**
 * Calls `onRequest` with each request's command (lowercase) and source: a client's address, or "lua" for a
 * command a script ran inside the server (not a round trip).
 */
export async function monitorRedis(
  port: number,
  onRequest: (command: string, source: string) => void,
): Promise<{ close(): void }> {
  const socket = connect(port, '127.0.0.1')
  socket.setEncoding('utf8')
  let pending = ''
  let monitoring = false
  await new Promise<void>((resolve, reject) => {
    const failed = (error: Error) => (monitoring ? undefined : reject(error))
    socket.on('error', failed)
    socket.on('connect', () => socket.write('MONITOR\r\n'))
    socket.on('data', (chunk: string) => {
      pending += chunk
      let end = pending.indexOf('\r\n')
      while (end >= 0) {
        const line = pending.slice(0, end)
        pending = pending.slice(end + 2)
        end = pending.indexOf('\r\n')
        if (!monitoring) {
          if (line !== '+OK') return failed(new Error(`MONITOR on 127.0.0.1:${port} replied ${line}`))
          monitoring = true
          resolve()
          continue
        }
        // +1795762855.343754 [0 127.0.0.1:58478] "info" ...   (MONITOR escapes quotes and line ends)
        const request = /^\+[\d.]+ \[\d+ ([^\]]+)\] "([^"]*)"/.exec(line)
        if (request) onRequest(request[2]!.toLowerCase(), request[1]!)
      }
    })
  })
  return { close: () => socket.destroy() }
}
