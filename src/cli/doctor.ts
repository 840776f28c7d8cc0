import type { DoctorFinding } from '../core/backend.js'
import { COMMON_OPTIONS, resolveUrl, UsageError } from './args.js'
import { parseCommand, reasonOf, withOpened } from './context.js'
import { EXIT } from './exit-codes.js'

export const DOCTOR_HELP = `Usage: fencelock doctor [<url>] [--strict]

Connects to the backend (default: --url, $FENCELOCK_URL, else this host's shared lock folder: see
fencelock --help), checks the settings and semantics fencelock relies on, and prints one finding per
line: ok, info, warn or error. It changes nothing in the store: where a semantic can only be seen by
writing (conditional writes on S3, GCS, DynamoDB; link() in a lock folder), it writes a probe record of
its own, says so, and removes it.

Options:
  --strict   a warning fails too (exit 78): for CI and deploy checks

Exit codes: 0 no error (and, with --strict, no warning); 69 an error (the store cannot be reached, or a
setting breaks fencelock); 78 with --strict, a warning and no error; 64 bad usage.`

const DOCTOR_OPTIONS = { ...COMMON_OPTIONS, strict: { type: 'boolean' } } as const

export async function doctorCommand(argv: string[]): Promise<number> {
  const parsed = parseCommand(argv, DOCTOR_OPTIONS, DOCTOR_HELP)
  if (parsed === undefined) return EXIT.ok
  const { values, positionals } = parsed
  if (positionals.length > 1) throw new UsageError('usage: fencelock doctor [<url>] [--strict]')
  // No URL: the default folder, not made (doctor changes nothing; the file backend reports it missing).
  const url = positionals[0] ?? resolveUrl(values, process.env, false)
  return withOpened({ ...values, url }, undefined, async (opened) => {
    process.stdout.write(`backend: ${opened.backend.id}\n`)
    const findings: DoctorFinding[] = []
    try {
      // The store is asked first, with a bound: an unreachable one is a finding with its fix, not a hang.
      await opened.client.inspect('.fencelock-doctor', { signal: AbortSignal.timeout(10_000) })
      findings.push({ level: 'ok', message: 'the store answers' })
      findings.push(
        ...(opened.backend.doctor
          ? await opened.backend.doctor(AbortSignal.timeout(30_000))
          : [{ level: 'info' as const, message: 'this backend has no specific checks' }]),
      )
    } catch (error) {
      findings.push({
        level: 'error',
        message:
          `cannot reach the store: ${reasonOf(error)}. Check that the server runs and that the URL's host, ` +
          'port, scheme (TLS or not) and credentials are right',
      })
    }
    for (const f of findings) process.stdout.write(`${f.level.padEnd(5)} ${f.message}\n`)
    return exitFor(findings, values.strict === true)
  })
}

/** 69 on an error; with `strict`, 78 on a warning; else 0. */
export function exitFor(findings: readonly DoctorFinding[], strict: boolean): number {
  if (findings.some((f) => f.level === 'error')) return EXIT.unavailable
  if (strict && findings.some((f) => f.level === 'warn')) return EXIT.warnings
  return EXIT.ok
}
