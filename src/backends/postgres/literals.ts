/**
 * Values written into the statements as literals that mean the same under every session setting. The
 * statements go out as one simple-protocol message (the isolation pin and the statement: see adapter.ts),
 * which takes no parameters. Text travels as hex digits decoded on the server, so no quote, backslash,
 * `standard_conforming_strings` or client encoding can change what it says; numbers are checked before
 * they are spelled out.
 */

/** `value` as a text expression: its UTF-8 bytes in hex, decoded by the server. */
export function textLiteral(value: string): string {
  return `pg_catalog.convert_from(pg_catalog.decode('${Buffer.from(value, 'utf8').toString('hex')}', 'hex'), 'UTF8')`
}

/** A finite number as a float8. */
export function floatLiteral(value: number): string {
  if (!Number.isFinite(value)) throw new TypeError(`Expected a finite number, got ${String(value)}`)
  return `'${value}'::pg_catalog.float8`
}

/** A bigint as an int8. */
export function bigintLiteral(value: bigint): string {
  return `'${value.toString()}'::pg_catalog.int8`
}

/**
 * A relation's name (quoted, qualified) as a regclass: an E'' string, its backslashes and quotes escaped,
 * reads the same under every `standard_conforming_strings`.
 */
export function regclassLiteral(name: string): string {
  return `E'${name.replaceAll('\\', '\\\\').replaceAll("'", "''")}'::pg_catalog.regclass`
}
