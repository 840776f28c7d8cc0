import { pathToFileURL } from 'node:url'
import { parseArgs } from 'node:util'
import { suggest } from '../core/options.js'
import { hideUserinfo } from '../core/url.js'
import { backendSchemes, parseBackendUrl } from '../schemes.js'
import { defaultFolder } from './lock-folder.js'

export class UsageError extends Error {
  override name = 'UsageError'
}

/**
 * The default backend: this host's shared folder of file locks, else the per-user one (see lock-folder.ts);
 * with `create` false, the folder is not made (doctor).
 */
export function defaultUrl(env: NodeJS.ProcessEnv = process.env, create = true): string {
  return pathToFileURL(defaultFolder(env, undefined, undefined, create)).href
}

/** The backends the CLI offers: every scheme of this build but memory:, whose locks live in one process. */
export const cliSchemes = () => backendSchemes().filter(([scheme]) => scheme !== 'memory:')

/**
 * Parses a backend URL for the CLI.
 * @throws {UsageError} for memory: and for schemes this build lacks, saying what to use instead
 */
export function parseCliUrl(text: string): URL {
  const scheme = /^[a-z][a-z0-9+.-]*:/i.exec(text)?.[0].toLowerCase()
  const schemes = cliSchemes()
  const example = (s: string) => schemes.find(([name]) => name === s)?.[1].example
  if (scheme === 'memory:') {
    throw new UsageError(
      "memory: locks live inside one process, so separate fencelock processes would never see each other's: " +
        `use a folder of file locks, e.g. --url ${example('file:')}, or no --url for this host's shared folder`,
    )
  }
  if (scheme === undefined) {
    throw new UsageError(
      `Expected a backend URL such as ${example('file:')} or ${example('redis:')}, got ` +
        JSON.stringify(hideUserinfo(text)),
    )
  }
  if (example(scheme) === undefined) {
    throw new UsageError(
      `unknown lock backend scheme "${scheme}"; fencelock supports ${schemes.map(([, s]) => s.example).join(', ')}`,
    )
  }
  return parseBackendUrl(text)
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
    throw new UsageError(explainParseError(error as NodeJS.ErrnoException, options))
  }
}

/** Node's parseArgs text for a misspelled option, said as the library says it: with a "did you mean". */
function explainParseError(error: NodeJS.ErrnoException, options: Record<string, unknown>): string {
  const unknown = /Unknown option '(-{1,2})([^']+)'/.exec(error.message)
  if (error.code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION' || !unknown) return error.message
  const [, dashes, name] = unknown as unknown as [string, string, string]
  const guess = dashes === '--' ? suggest(name, Object.keys(options)) : undefined
  return `unknown option ${dashes}${name}${guess ? `; did you mean --${guess}?` : ''} (--help lists the options)`
}

export function resolveUrl(
  values: ParsedOptions,
  env: NodeJS.ProcessEnv = process.env,
  create = true,
): string {
  return (values.url as string | undefined) || env.FENCELOCK_URL || defaultUrl(env, create)
}
