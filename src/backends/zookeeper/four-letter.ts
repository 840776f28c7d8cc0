/**
 * ZooKeeper's four-letter words (`srvr`, `ruok`, `mntr`): a word sent on the client port, the answer read
 * until the server closes the connection. `doctor` asks `srvr` for the version and mode; the tests use it
 * to tell when a member is ready and which one leads. A server answers only the words its
 * `4lw.commands.whitelist` allows (3.5+ allows `srvr` by default); another word gets a refusal text.
 */
import { Socket } from 'node:net'

/** Sends `word` to `host:port` and resolves with the whole answer; rejects on a connection error or `signal`. */
export function fourLetterWord(
  host: string,
  port: number,
  word: string,
  signal: AbortSignal,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = new Socket({ signal })
    const chunks: Buffer[] = []
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.once('error', reject)
    // The server closes the connection once it has written its answer.
    socket.once('close', (hadError) => {
      if (!hadError) resolve(Buffer.concat(chunks).toString('utf8'))
    })
    socket.connect(port, host, () => socket.end(word))
  })
}

/** What `srvr` says of a server: its version and its mode. */
export interface ServerStatus {
  /** `3.8.0-…` (the first word after "Zookeeper version:"). */
  readonly version: string | undefined
  /** `standalone`, `leader`, `follower` or `observer`; undefined while the server does not serve. */
  readonly mode: string | undefined
  /** The id of the latest transaction the server applied (hex in the answer). */
  readonly zxid: bigint | undefined
}

/** Reads the answer of `srvr` ("This ZooKeeper instance is not currently serving requests" gives no mode). */
export function parseSrvr(text: string): ServerStatus {
  const version = /Zookeeper version: ([^\s,]+)/.exec(text)?.[1]
  const mode = /^Mode: (\w+)/m.exec(text)?.[1]
  const zxid = /^Zxid: (0x[0-9a-f]+)/im.exec(text)?.[1]
  return { version, mode, zxid: zxid === undefined ? undefined : BigInt(zxid) }
}
