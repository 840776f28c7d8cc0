import { createInterface } from 'node:readline'
import type { LockClient } from '../core/client.js'
import { UsageError } from './args.js'
import { describeHolder, onlyKey, parseCommand, printJson, withOpened } from './context.js'
import { EXIT } from './exit-codes.js'

export const BREAK_HELP = `Usage: fencelock break <key> [--fence <n>] [--yes] [--url <url>]

Frees <key> whoever holds it: the way out when a holder is stuck (a hung process that still renews, or a
dead one whose lease the store keeps for its ttl). Use it rather than deleting the store's state by hand:
it keeps the fence, so the next holder's fence is greater than the stuck one's, and waiters are woken.
The stuck holder finds out at its next renewal; until then it may still act, which only a resource that
checks fences can refuse.

On a terminal it shows the holder and asks, then breaks only that grant (its fence). Elsewhere it needs
--yes. Prints one JSON line: {"key","backend","broken","owner","holder","fence"} (the lease it ended, or
the one it left alone). Exits 0 whether or not there was a lock to break.

Options:
  --fence <n>   break only the grant with this fence (a lock taken since is left alone)
  --yes         do not ask
  --url <url>   backend URL (default: $FENCELOCK_URL, else this host's shared lock folder)
  -h, --help    this help`

const BREAK_OPTIONS = {
  url: { type: 'string' },
  fence: { type: 'string' },
  yes: { type: 'boolean', short: 'y' },
  help: { type: 'boolean', short: 'h' },
} as const

export async function breakCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, BREAK_OPTIONS, BREAK_HELP)
  if (parsed === undefined) return EXIT.ok
  const { values, positionals } = parsed
  const key = onlyKey(positionals, 'usage: fencelock break <key> [--fence <n>] [--yes] [--url <url>]')
  let fence = parseFence(values.fence as string | undefined)
  const ask = values.yes !== true
  if (ask && !(process.stdin.isTTY && process.stderr.isTTY)) {
    throw new UsageError(
      `fencelock break ends someone's lease on ${JSON.stringify(key)}: pass --yes to confirm (there is no terminal to ask on)`,
    )
  }
  return withOpened(values, undefined, async (opened) => {
    if (ask) {
      const seen = await confirm(opened.client, key, opened.backend.id, fence)
      if (seen === 'no') return EXIT.ok
      fence = seen
    }
    const result = await opened.client.break(key, fence === undefined ? {} : { fence })
    printJson({ key, backend: opened.backend.id, broken: result.broken, ...result.lease })
    if (process.stderr.isTTY) {
      const what = result.broken
        ? `broke the lock (fence ${result.lease?.fence}); its holder finds out at its next renewal`
        : result.lease
          ? `left it alone: ${describeHolder({ held: true, ...result.lease })} now`
          : 'nothing to break: it is free'
      process.stderr.write(`${key} on ${opened.backend.id}: ${what}\n`)
    }
    return EXIT.ok
  })
}

function parseFence(text: string | undefined): bigint | undefined {
  if (text === undefined) return undefined
  if (!/^[1-9]\d{0,39}$/.test(text)) {
    throw new UsageError(
      `--fence: expected a lock's fence, a positive whole number, got ${JSON.stringify(text)}`,
    )
  }
  return BigInt(text)
}

/**
 * Shows who holds `key` and asks; 'no' unless the answer is yes. A yes breaks only the grant shown (its
 * fence), so a lock re-taken while the operator read is left alone.
 */
async function confirm(
  client: LockClient,
  key: string,
  backend: string,
  fence: bigint | undefined,
): Promise<bigint | undefined | 'no'> {
  const info = await client.inspect(key)
  if (!info.held || (fence !== undefined && info.fence !== fence)) {
    const now = info.held ? describeHolder(info) : 'free'
    process.stderr.write(`${key} on ${backend}: ${now}; nothing to break\n`)
    return 'no'
  }
  const left = info.expiresInMs === undefined ? '' : `, ${(info.expiresInMs / 1000).toFixed(1)} s left`
  const lines = createInterface({ input: process.stdin, output: process.stderr })
  try {
    const answer = await new Promise<string>((resolve) => {
      lines.question(
        `${key} on ${backend}: ${describeHolder(info)}${left}.\nBreak it? Its holder may still act until its next renewal. [y/N] `,
        resolve,
      )
      lines.once('close', () => resolve(''))
    })
    return /^y(es)?$/i.test(answer.trim()) ? (info.fence ?? fence) : 'no'
  } finally {
    lines.close()
  }
}
