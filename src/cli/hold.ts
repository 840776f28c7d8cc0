import { createInterface } from 'node:readline'
import { COMMON_OPTIONS } from './args.js'
import {
  holderOf,
  onLockLost,
  onlyKey,
  parseCommand,
  printJson,
  showWaiting,
  timeoutOf,
  withOpened,
} from './context.js'
import { EXIT } from './exit-codes.js'

export const HOLD_HELP = `Usage: fencelock hold <key> [options]

Takes the lock <key>, prints one JSON line when acquired ({"event":"acquired","key","owner","fence",...})
and holds it, renewing, until a line on stdin says:
  release   release the lock, print {"event":"released"} and exit 0
  abandon   exit at once WITHOUT releasing (as a crash would): the lease ends after its ttl
End of input releases too. If the lock is lost, prints {"event":"lost",...} and exits 76.

Options:
  --url <url>          backend URL (default: $FENCELOCK_URL, else this host's shared lock folder: see
                       fencelock --help); memory: is refused (it cannot work across processes)
  --ttl <duration>     lease length (default: 30s)
  --timeout <duration> how long to wait for the lock (default: forever)
  --holder <text>      who holds the lock, as inspect and waiters show it (default: "<host> (pid <pid>)")
  -v, --verbose        say on stderr when waiting
  -h, --help           this help`

export async function holdCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, { ...COMMON_OPTIONS, holder: { type: 'string' } }, HOLD_HELP)
  if (parsed === undefined) return EXIT.ok
  const { values, positionals } = parsed
  const key = onlyKey(positionals, 'usage: fencelock hold <key> [options]')
  const timeout = timeoutOf(values)
  return withOpened(values, holderOf(), async (opened) => {
    const stopStatus = showWaiting(opened.client, key, values.verbose === true)
    const lock = await opened.client
      .acquire(key, timeout === undefined ? {} : { timeout })
      .finally(stopStatus)
    printJson({ event: 'acquired', key, owner: lock.owner, fence: lock.fence, pid: process.pid })
    const lines = createInterface({ input: process.stdin })
    const outcome = await new Promise<'release' | 'abandon' | 'lost'>((resolve) => {
      onLockLost(lock, () => resolve('lost'))
      lines.on('line', (line) => {
        const word = line.trim()
        if (word === 'release' || word === 'abandon') resolve(word)
        // Said on stderr, so the JSON lines on stdout stay a clean protocol; the lock is kept.
        else if (word !== '')
          process.stderr.write(
            `fencelock: unknown input ${JSON.stringify(word)}; expected release or abandon\n`,
          )
      })
      lines.on('close', () => resolve('release'))
    })
    lines.close()
    if (outcome === 'abandon') {
      // A crash, on purpose: no release, no cleanup; the lease must end by its ttl.
      process.exit(EXIT.ok)
    }
    if (outcome === 'lost') {
      printJson({ event: 'lost', key, fence: lock.fence, reason: (lock.signal.reason as Error).message })
      return EXIT.lost
    }
    await lock.release()
    printJson({ event: 'released', key, fence: lock.fence })
    return EXIT.ok
  })
}
