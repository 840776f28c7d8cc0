import { randomBytes } from 'node:crypto'

/** Ids are cut from a buffer of CSPRNG bytes refilled 256 ids at a time: one syscall, not one per acquire. */
let pool = Buffer.alloc(0)
let offset = 0

/** A random 128-bit owner id, as 32 hex characters. */
export function newOwnerId(): string {
  if (offset + 16 > pool.length) {
    pool = randomBytes(4096)
    offset = 0
  }
  const id = pool.toString('hex', offset, offset + 16)
  offset += 16
  return id
}
