/**
 * `fencelock elect`: campaign for an election, run a command while leading, resign when it ends; and
 * `fencelock observe`: print who leads an election, now and at every change.
 */
import { type LeaderView, parseValue } from '../core/election.js'
import { COMMON_OPTIONS, UsageError } from './args.js'
import { onlyKey, parseCommand, printJson, timeoutOf, withOpened } from './context.js'
import { EXIT } from './exit-codes.js'
import { parseJob, runHolding, withWatchdog } from './run.js'

export const ELECT_HELP = `Usage: fencelock elect <election> [options] -- <command> [args...]

Campaigns to lead <election>, waiting while another candidate leads; once leading, runs <command> (as
"fencelock run" runs it: its own process group, stopped on loss, a watchdog should fencelock die), and
resigns when it ends, exiting with its status. The command gets FENCELOCK_ELECTION, FENCELOCK_TERM (the
leadership's term: greater than every earlier leader's; pass it with every write, so a resource can
refuse a stale leader), FENCELOCK_FENCE (the same number) and FENCELOCK_VALUE in its environment.

Options:
  --url <url>          backend URL (default: $FENCELOCK_URL, else this host's shared lock folder)
  --value <text>       what this candidate publishes while it leads (an address, an id; at most 1 KiB)
  --ttl <duration>     lease length, renewed every ttl/3 (default: 30s)
  --timeout <duration> how long to wait to lead (default: forever; 0 = try once)
  --kill-after <dur>   grace between SIGTERM and SIGKILL when leadership is lost (default: 10s)
  --foreground         run the command in fencelock's own process group (see fencelock run --help)
  --holder <text>      who leads, in words, as observers show it
  -v, --verbose        say on stderr when waiting and leading
  -h, --help           this help

Exit codes: the command's own; 64 usage, 69 backend unavailable, 75 not leading within --timeout,
76 leadership lost while running, 126/127 command not executable/found.`

export async function electCommand(argv: string[]): Promise<number> {
  const job = parseJob('elect', argv, { value: { type: 'string' } }, ELECT_HELP)
  if (job === undefined) return EXIT.ok
  const raw = job.values.value
  let value = ''
  if (typeof raw === 'string') {
    try {
      value = parseValue(raw)
    } catch (error) {
      throw new UsageError(`--value: ${(error as Error).message}`)
    }
  }
  const timeout = timeoutOf(job.values)
  const verbose = job.values.verbose === true
  return withWatchdog(job.killAfterMs, (watchdog) =>
    runHolding(job.command, job.values, job.killAfterMs, watchdog, async (opened, signal) => {
      if (verbose) process.stderr.write(`fencelock: campaigning for ${job.name}\n`)
      const lead = await opened.client
        .election(job.name)
        .campaign({ value, signal, ...(timeout === undefined ? {} : { timeout }) })
      return {
        signal: lead.signal,
        env: {
          FENCELOCK_ELECTION: job.name,
          FENCELOCK_TERM: lead.term.toString(),
          FENCELOCK_FENCE: lead.term.toString(),
          FENCELOCK_VALUE: lead.value,
        },
        said: `leading ${job.name} (term ${lead.term})`,
        release: () => lead.resign(),
      }
    }),
  )
}

export const OBSERVE_HELP = `Usage: fencelock observe <election> [--url <url>] [--once]

Prints who leads <election>, one JSON line now and one at every change, until interrupted:
{"election","backend","leader":true,"term","value","owner","holder","expiresInMs"} while someone leads,
{"election","backend","leader":false} while nobody does. With --once, prints the current line and exits.
Diagnostic: only a campaign makes a leader.`

/** A view as printed: without `isMe`, which says nothing here (this process campaigns for nothing). */
function printable(view: LeaderView): object {
  if (!view.leader) return view
  const { isMe: _isMe, ...shown } = view
  return shown
}

export async function observeCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, { ...COMMON_OPTIONS, once: { type: 'boolean' } }, OBSERVE_HELP)
  if (parsed === undefined) return EXIT.ok
  const name = onlyKey(parsed.positionals, 'usage: fencelock observe <election> [--url <url>] [--once]')
  return withOpened(parsed.values, undefined, async (opened) => {
    const election = opened.client.election(name)
    const line = { election: name, backend: opened.backend.id }
    if (parsed.values.once === true) {
      printJson({ ...line, ...printable(await election.leader()) })
      return EXIT.ok
    }
    const stop = new AbortController()
    const onSignal = () => stop.abort()
    process.once('SIGINT', onSignal)
    process.once('SIGTERM', onSignal)
    try {
      for await (const view of election.observe({ signal: stop.signal })) {
        printJson({ ...line, ...printable(view) })
      }
      return EXIT.ok
    } finally {
      process.removeListener('SIGINT', onSignal)
      process.removeListener('SIGTERM', onSignal)
    }
  })
}
