/**
 * A Map that forgets its oldest entries beyond a size: for bookkeeping keyed by something whose end we may
 * never hear of (an acquire that ends without telling the backend, a hold whose release never reaches us),
 * so that it cannot pile up.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(readonly limit: number) {
    super()
  }

  /** Sets `key` (an existing key keeps its place in the order), then drops the oldest entry if over the limit. */
  override set(key: K, value: V): this {
    super.set(key, value)
    if (this.size > this.limit) this.delete(this.keys().next().value as K)
    return this
  }

  /** Sets `key` as the newest entry (moved to the end if it was there), then bounds the size like `set`. */
  renew(key: K, value: V): this {
    this.delete(key)
    return this.set(key, value)
  }
}
