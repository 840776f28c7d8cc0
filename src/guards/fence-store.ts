/**
 * Where an HTTP guard (http.ts) keeps the last fence it admitted for each resource. `advance` is the
 * whole contract: compare and record in one atomic step, so two requests never both pass against the
 * same old fence. The memory store is one process's; servers behind a load balancer need a shared one
 * (`redisFenceStore` in redis.ts, or your own over a store that can compare and set atomically).
 */

/**
 * The last fence admitted per resource.
 * @example
 * // A shared store over PostgreSQL: one upsert compares and records atomically.
 * const store: FenceStore = {
 *   async advance(resource, fence) {
 *     const [row] = await sql<{ fence: string }[]>`
 *       INSERT INTO fences (resource, fence) VALUES (${resource}, ${fence.toString()}::bigint)
 *       ON CONFLICT (resource) DO UPDATE SET fence = GREATEST(fences.fence, EXCLUDED.fence)
 *       RETURNING fence::text`
 *     if (!row) throw new Error('the upsert returned no row')
 *     return BigInt(row.fence)
 *   },
 * }
 */
export interface FenceStore {
  /**
   * Records `fence` for `resource` unless a greater one is recorded, atomically, and returns the fence
   * recorded afterwards: `fence` itself when admitted, the greater one when refused.
   */
  advance(resource: string, fence: bigint): Promise<bigint> | bigint
}

/**
 * A fence store in this process's memory: one entry per resource ever guarded, kept for the process's
 * life (forgetting a resource's fence would admit its stale holders again). Right for one server
 * instance; several instances need a shared store.
 * @example
 * const store = memoryFenceStore()
 * store.advance('report:7', 12n) // 12n: admitted
 * store.advance('report:7', 11n) // 12n: refused, 12 was seen
 */
export function memoryFenceStore(): FenceStore {
  const latest = new Map<string, bigint>()
  return {
    advance(resource, fence) {
      const seen = latest.get(resource)
      if (seen !== undefined && seen > fence) return seen
      latest.set(resource, fence)
      return fence
    },
  }
}
