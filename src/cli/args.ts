import { homedir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'

export class UsageError extends Error {
  override name = 'UsageError'
}

/** The per-user default: locks shared by this user's processes on this host, kept across reboots. */
export function defaultUrl(env: NodeJS.ProcessEnv = process.env): string {
  const state = env.XDG_STATE_HOME || join(homedir(), '.local', 'state')
  return pathToFileURL(join(state, 'fencelock', 'locks')).href
}

export const COMMON_OPTIONS = {
  url: { type: 'string' },
  ttl: { type: 'string' },
  timeout: { type: 'string' },
  verbose: { type: 'boolean', short: 'v' },
  help: { type: 'boolean', short: 'h' },
} as const

export type ParsedOptions = Record<string, string | boolean | undefined>

/** Parses `args` strictly; unknown options and missing values become a UsageError naming them. */
export function parse(
  args: string[],
  options: Record<string, { type: 'string' | 'boolean'; short?: string }>,
): { values: ParsedOptions; positionals: string[] } {
  try {
    const { values, positionals } = parseArgs({ args, options, allowPositionals: true, strict: true })
    return { values: values as ParsedOptions, positionals }
  } catch (error) {
    throw new UsageError((error as Error).message)
  }
}

export function resolveUrl(values: ParsedOptions, env: NodeJS.ProcessEnv = process.env): string {
  return (values.url as string | undefined) || env.FENCELOCK_URL || defaultUrl(env)
}
