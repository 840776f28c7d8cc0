import { COMMON_OPTIONS, parse, UsageError } from './args.js'
import { open, printJson } from './context.js'
import { EXIT } from './exit-codes.js'

export const INSPECT_HELP = `Usage: fencelock inspect <key> [--url <url>]

Prints what the store says about <key> now, as one JSON line: {"key","held","owner","fence","expiresInMs"}.
Diagnostic only: it may change the moment after; only an acquire decides who holds a lock.`

export async function inspectCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parse(argv, COMMON_OPTIONS)
  if (values.help) {
    process.stdout.write(`${INSPECT_HELP}\n`)
    return EXIT.ok
  }
  const [key, ...extra] = positionals
  if (key === undefined || extra.length > 0)
    throw new UsageError('usage: fencelock inspect <key> [--url <url>]')
  const opened = await open(values)
  try {
    const info = await opened.client.inspect(key)
    printJson({ key, backend: opened.backend.id, ...info })
    return EXIT.ok
  } finally {
    await opened.close()
  }
}
