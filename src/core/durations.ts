/**
 * A duration: milliseconds as a number, or a string such as `'250ms'`, `'15s'`, `'2m'`, `'1h'`, `'1d'`:
 * a decimal number and its unit written together (Go's `time.ParseDuration` form, plus days).
 */
export type Duration = number | `${number}${'ms' | 's' | 'm' | 'h' | 'd'}` | (string & {})

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const
/**
 * One form only: no space between number and unit. Allowing `'10 s'` invites `'5 days'` and `'1 hour'`,
 * which we would then have to refuse; whitespace around the whole value (a quoted CLI or env value) is fine.
 */
const PATTERN = /^\s*(\d+(?:\.\d+)?)(ms|s|m|h|d)\s*$/

/** Describes a received value for an error message: `-1` (number), `"abc"` (string). */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return `${JSON.stringify(value)} (string)`
  if (typeof value === 'bigint') return `${value}n (bigint)`
  if (value === null) return 'null'
  if (typeof value === 'object') return `${Object.prototype.toString.call(value)} (object)`
  return `\`${String(value)}\` (${typeof value})`
}

/**
 * Parses a duration into milliseconds.
 * @throws {TypeError} naming `name`, the expected form and the value received.
 */
export function parseDuration(
  name: string,
  value: unknown,
  { min = 0, allowInfinity = false }: { min?: number | undefined; allowInfinity?: boolean | undefined } = {},
): number {
  let ms: number | undefined
  if (typeof value === 'number') ms = value
  else if (typeof value === 'string') {
    const match = PATTERN.exec(value)
    if (match) ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]
    // Zero needs no unit; any other bare number is ambiguous (ms? seconds?) and refused.
    else if (value.trim() === '0') ms = 0
  }
  const ok =
    ms !== undefined &&
    !Number.isNaN(ms) &&
    (Number.isFinite(ms) || (allowInfinity && ms === Number.POSITIVE_INFINITY)) &&
    (min === 0 ? ms >= 0 : ms >= min)
  if (!ok) {
    const range = min === 0 ? '>= 0' : `>= ${min} ms`
    const forms = `milliseconds or a number and unit (ms, s, m, h, d) without a space, like '250ms', '15s', '2m'${allowInfinity ? ', or Infinity' : ''}`
    throw new TypeError(
      `Expected \`${name}\` to be a duration ${range} (${forms}), got ${describeValue(value)}`,
    )
  }
  return Math.ceil(ms as number)
}
