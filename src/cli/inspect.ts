import { COMMON_OPTIONS } from './args.js'
import { describeHolder, onlyKey, parseCommand, printJson, withOpened } from './context.js'
import { EXIT } from './exit-codes.js'

export const INSPECT_HELP = `Usage: fencelock inspect <key> [--url <url>]

Prints what the store says about <key> now, as one JSON line:
{"key","backend","held","owner","holder","fence","expiresInMs"} ("holder": who holds it, in words,
when the store keeps it), and on stderr, when it is a terminal, the same in a sentence.
Diagnostic only: it may change the moment after; only an acquire decides who holds a lock.`

export async function inspectCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, COMMON_OPTIONS, INSPECT_HELP)
  if (parsed === undefined) return EXIT.ok
  const key = onlyKey(parsed.positionals, 'usage: fencelock inspect <key> [--url <url>]')
  return withOpened(parsed.values, undefined, async (opened) => {
    const info = await opened.client.inspect(key)
    printJson({ key, backend: opened.backend.id, ...info })
    if (process.stderr.isTTY) {
      const state = info.held
        ? `${describeHolder(info)}${info.expiresInMs === undefined ? '' : `, ${(info.expiresInMs / 1000).toFixed(1)} s left`}`
        : 'free'
      process.stderr.write(`${key} on ${opened.backend.id}: ${state}\n`)
    }
    return EXIT.ok
  })
}
