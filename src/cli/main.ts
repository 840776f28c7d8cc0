#!/usr/bin/env node
import { readFileSync } from 'node:fs'
import { setDriverSearchPaths } from '../core/drivers.js'
import { cliSchemes, UsageError } from './args.js'
import { BREAK_HELP, breakCommand } from './break.js'
import { DOCTOR_HELP, doctorCommand } from './doctor.js'
import { driverSearchPaths } from './driver-paths.js'
import { EXIT, exitCodeFor } from './exit-codes.js'
import { HOLD_HELP, holdCommand } from './hold.js'
import { INSPECT_HELP, inspectCommand } from './inspect.js'
import { LIST_HELP, listCommand } from './list.js'
import { perUserFolder, sharedFolder } from './lock-folder.js'
import { PRUNE_HELP, pruneCommand } from './prune.js'
import { RUN_HELP, runCommand } from './run.js'

/** The top-level help; the backends and the default folder are this build's and this host's. */
function help(): string {
  const shared = sharedFolder()
  const schemes = cliSchemes()
  const width = Math.max(...schemes.map(([, s]) => s.example.length))
  const backends = schemes.map(([, s]) => `  ${s.example.padEnd(width)}  ${s.summary}`)
  return `Usage: fencelock <command> [options]

Distributed locks with fencing tokens, from the shell.

Commands:
  run <key> -- <cmd...>   run a command while holding the lock (FENCELOCK_KEY, FENCELOCK_FENCE in its env)
  hold <key>              hold the lock until stdin says release (or abandon)
  inspect <key>           print who holds the lock now (diagnostic)
  list [<prefix>]         print the locks held now, with holder, fence and lease left
  break <key>             free a stuck lock, keeping its fence (asks first; --yes in scripts)
  doctor [<url>]          check a backend's settings and semantics (--strict: warnings fail)
  prune [<prefix>]        remove what a lock folder keeps for names whose locks have ended

Backends (--url URL, or $FENCELOCK_URL):
${backends.join('\n')}

${
  shared === undefined
    ? `Without either, a per-user folder of file locks: ${perUserFolder()}.`
    : `Without either, this host's shared folder of file locks, ${shared}, where the processes of every
user exclude each other (if it cannot be used: the per-user ${perUserFolder()}, with a note).`
}

Exit codes: 64 usage, 69 backend unavailable, 75 not acquired, 76 lock lost, 78 doctor --strict found a
warning; run passes on its command's.
Run "fencelock <command> --help" for a command's options.`
}

const COMMANDS: Record<string, { run: (argv: string[]) => Promise<number>; help: string }> = {
  run: { run: runCommand, help: RUN_HELP },
  hold: { run: holdCommand, help: HOLD_HELP },
  inspect: { run: inspectCommand, help: INSPECT_HELP },
  list: { run: listCommand, help: LIST_HELP },
  break: { run: breakCommand, help: BREAK_HELP },
  doctor: { run: doctorCommand, help: DOCTOR_HELP },
  prune: { run: pruneCommand, help: PRUNE_HELP },
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const topic = name === 'help' && rest[0] ? COMMANDS[rest[0]]?.help : undefined
    process.stdout.write(`${topic ?? help()}\n`)
    return name === undefined ? EXIT.usage : EXIT.ok
  }
  if (name === '--version') {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version: string
    }
    process.stdout.write(`${pkg.version}\n`)
    return EXIT.ok
  }
  const command = COMMANDS[name]
  if (!command)
    throw new UsageError(`unknown command "${name}"; commands: ${Object.keys(COMMANDS).join(', ')}`)
  return command.run(rest)
}

// A driver installed in the current project or globally serves a global or npx-run CLI too.
setDriverSearchPaths(driverSearchPaths())
main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (error: Error) => {
    process.stderr.write(`fencelock: ${error.message}\n`)
    process.exitCode = error instanceof UsageError ? EXIT.usage : exitCodeFor(error)
  },
)
