/**
 * What the key names of every primitive share: the prefix, the hash tag `{…}` that puts every key of one
 * name in one Redis Cluster slot (so a primitive's scripts touch a single slot and run unchanged on a
 * Cluster), and the slot of a key name (a batch sent as one script is grouped by it).
 */
import { createHash } from 'node:crypto'

/** The prefix of every key and channel unless the user picks another (`?prefix=`). */
export const DEFAULT_PREFIX = 'fencelock:'

/**
 * `<prefix>{<tag>}`, the start of every key name of the name `key`. The tag is the key itself, or, for a key
 * with a brace (which would end the tag early), `#` and its SHA-256 in hex: `hashed`, whose key only a
 * record of it can tell.
 */
export function taggedName(key: string, prefix: string): { readonly name: string; readonly hashed: boolean } {
  const hashed = /[{}]/.test(key)
  const tag = hashed ? `#${createHash('sha256').update(key).digest('hex')}` : key
  return { name: `${prefix}{${tag}}`, hashed }
}

/** The Cluster slot of a key name: CRC16 (XMODEM) of its hash tag, or of the whole name without one. */
export function slotOf(name: string): number {
  const open = name.indexOf('{')
  const close = open < 0 ? -1 : name.indexOf('}', open + 1)
  const hashed = close > open + 1 ? name.slice(open + 1, close) : name
  let crc = 0
  for (const byte of Buffer.from(hashed)) {
    crc ^= byte << 8
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
  }
  return crc % 16_384
}
