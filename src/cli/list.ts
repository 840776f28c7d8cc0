import type { ListedLock } from '../core/backend.js'
import { toHolder } from '../core/options.js'
import { UsageError } from './args.js'
import { parseCommand, printJson, withOpened } from './context.js'
import { EXIT } from './exit-codes.js'

export const LIST_HELP = `Usage: fencelock list [<prefix>] [--json] [--url <url>]

Prints the locks held now whose keys start with <prefix> (every one without it), sorted by key: a table
of key, fence, lease left and holder, or with --json one JSON line per lock
({"key","backend","held","owner","holder","fence","expiresInMs"}, as inspect prints).
Diagnostic only: a lock may be taken or released the moment after.

Options:
  --url <url>   backend URL (default: $FENCELOCK_URL, else this host's shared lock folder)
  --json        one JSON line per lock instead of the table
  -h, --help    this help`

const LIST_OPTIONS = {
  url: { type: 'string' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const

export async function listCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, LIST_OPTIONS, LIST_HELP)
  if (parsed === undefined) return EXIT.ok
  const [prefix = '', ...extra] = parsed.positionals
  if (extra.length > 0) throw new UsageError('usage: fencelock list [<prefix>] [--json] [--url <url>]')
  return withOpened(parsed.values, undefined, async (opened) => {
    const found: ListedLock[] = []
    for await (const lock of opened.client.list(prefix)) found.push(lock)
    found.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    if (parsed.values.json) {
      for (const lock of found) printJson({ key: lock.key, backend: opened.backend.id, ...withoutKey(lock) })
    } else if (found.length > 0) {
      process.stdout.write(table(found))
    }
    if (process.stderr.isTTY || (found.length === 0 && !parsed.values.json)) {
      const under = prefix === '' ? '' : ` under ${JSON.stringify(prefix)}`
      process.stderr.write(
        `${found.length} lock${found.length === 1 ? '' : 's'} held${under} on ${opened.backend.id}\n`,
      )
    }
    return EXIT.ok
  })
}

function withoutKey({ key: _, ...info }: ListedLock): Omit<ListedLock, 'key'> {
  return info
}

/** A key as it is, or quoted as JSON when it holds control characters (which would garble the table). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const printableKey = (key: string) => (/[\u0000-\u001f\u007f-\u009f]/.test(key) ? JSON.stringify(key) : key)

/** Key, fence, lease left and holder in aligned columns; keys and holders made printable. */
function table(locks: readonly ListedLock[]): string {
  const rows = locks.map((lock) => [
    printableKey(lock.key),
    lock.fence === undefined ? '-' : lock.fence.toString(),
    lock.expiresInMs === undefined ? '-' : `${(lock.expiresInMs / 1000).toFixed(1)} s`,
    lock.holder === undefined ? (lock.owner ?? '-') : toHolder(lock.holder),
  ])
  const all = [['KEY', 'FENCE', 'LEASE LEFT', 'HOLDER'], ...rows]
  const widths = [0, 1, 2].map((c) => Math.max(...all.map((row) => row[c]?.length ?? 0)))
  return all
    .map((row) => row.map((cell, c) => (c < 3 ? cell.padEnd(widths[c] ?? 0) : cell)).join('  '))
    .join('\n')
    .concat('\n')
}
