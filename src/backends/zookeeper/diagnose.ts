/**
 * What `inspect` and `doctor` say about ZooKeeper: the holder of a lock from its child's data, each
 * member's version and mode (`srvr`), and the session timeout the server granted against the one asked.
 */
import type { DoctorFinding, LockInfo } from '../../core/backend.js'
import { causeText } from '../../core/errors.js'
import { fourLetterWord, parseSrvr } from './four-letter.js'

/**
 * Our data is "<owner> <holder>", then a line "session timeout <ms> ms" (layout.ts `entryData`); Curator's is its
 * host's IP address (then the child's name says who).
 */
export function describeHolder(child: string, data: Buffer, fence: bigint): LockInfo {
  const [value = '', timeoutLine = ''] = data.toString('utf8').split('\n', 2)
  const timeout = /^session timeout (\d+) ms$/.exec(timeoutLine)?.[1]
  const space = value.indexOf(' ')
  const owner = space < 0 ? value : value.slice(0, space)
  if (!/^[0-9a-f]{32}$/.test(owner)) {
    return {
      held: true,
      owner: child,
      fence,
      note: `held by a node not written by fencelock (${child}, Curator's?)`,
    }
  }
  return {
    held: true,
    owner,
    ...(space < 0 || space === value.length - 1 ? {} : { holder: value.slice(space + 1) }),
    fence,
    // The session's timeout: how long the lock would outlive its holder if it stopped now.
    ...(timeout === undefined ? {} : { expiresInMs: Number(timeout) }),
  }
}

/** What `srvr` says of one member, or that it cannot be reached. */
export async function srvrFinding(host: string, signal: AbortSignal): Promise<DoctorFinding> {
  const [name, port] = splitHost(host)
  try {
    const text = await fourLetterWord(
      name,
      port,
      'srvr',
      AbortSignal.any([signal, AbortSignal.timeout(5000)]),
    )
    const { version, mode } = parseSrvr(text)
    if (version === undefined)
      return { level: 'info', message: `${host}: srvr not answered (${text.trim()})` }
    if (mode === undefined)
      return { level: 'warn', message: `${host}: ZooKeeper ${version}, not serving requests` }
    return { level: 'ok', message: `${host}: ZooKeeper ${version}, ${mode}` }
  } catch (error) {
    return { level: 'error', message: `${host}: unreachable (${causeText(error)})` }
  }
}

function splitHost(host: string): [string, number] {
  const colon = host.lastIndexOf(':')
  if (colon < 0 || host.endsWith(']')) return [host.replace(/^\[|\]$/g, ''), 2181]
  return [host.slice(0, colon).replace(/^\[|\]$/g, ''), Number(host.slice(colon + 1))]
}

/** The session timeout granted (`got`) against the one asked (undefined: the user's client, asked by them). */
export function sessionFinding(asked: number | undefined, got: number): DoctorFinding {
  if (asked === undefined) {
    return {
      level: 'ok',
      message: `your client's session timeout is ${got} ms: every lock's validity is at most that, whatever its ttl`,
    }
  }
  if (got < asked) {
    return {
      level: 'warn',
      message:
        `the server granted a session timeout of ${got} ms for ${asked} ms asked: it clamps sessions ` +
        '(maxSessionTimeout, 20 ticks by default), so locks with longer ttls get that much validity',
    }
  }
  return { level: 'ok', message: `session timeout ${got} ms granted as asked` }
}
