import type { PruneResult } from '../backends/file/sweep.js'
import { UsageError } from './args.js'
import { parseCommand, printJson, withOpened } from './context.js'
import { EXIT } from './exit-codes.js'

export const PRUNE_HELP = `Usage: fencelock prune [<prefix>] [--url <url>]

Removes now what a lock folder keeps for the names under <prefix> (every name without it) whose locks
have ended: released, expired, broken, or whose holder's processes are gone. A live client does the same
on its own, a little at a time, a minute after a lock ends; prune is for a folder nobody uses any more,
or to reclaim it at once. Held locks are left alone, and fences never go back: the next grant of a pruned
name takes a new fence range, above every fence it had. Prints one JSON line:
{"backend","prefix","removed","held","kept"} (kept: a folder another process is writing in right now).
File backend only. What the other stores keep per name, and what retires it, is in docs/operations.md
(Storage growth and retiring names).

Options:
  --url <url>   backend URL (default: $FENCELOCK_URL, else this host's shared lock folder)
  -h, --help    this help`

const PRUNE_OPTIONS = {
  url: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const

/** A backend that keeps ended names until pruned (the file backend). */
interface Prunable {
  prune(prefix: string): Promise<PruneResult>
}

export async function pruneCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, PRUNE_OPTIONS, PRUNE_HELP)
  if (parsed === undefined) return EXIT.ok
  const [prefix = '', ...extra] = parsed.positionals
  if (extra.length > 0) throw new UsageError('usage: fencelock prune [<prefix>] [--url <url>]')
  return withOpened(parsed.values, undefined, async (opened) => {
    const backend = opened.backend as Partial<Prunable>
    if (typeof backend.prune !== 'function') {
      throw new UsageError(
        `${opened.backend.id} has no prune: it is for a lock folder (file://). What this store keeps per ` +
          'lock name, and what retires it, is in docs/operations.md (Storage growth and retiring names)',
      )
    }
    const result = await backend.prune(prefix)
    printJson({ backend: opened.backend.id, prefix, ...result })
    return EXIT.ok
  })
}
