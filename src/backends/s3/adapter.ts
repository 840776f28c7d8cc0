/**
 * The S3 adapter of the `cas-lease` engine: one object per lock, read with GetObject (strongly consistent
 * since December 2020) and written only by conditional PutObject: `If-None-Match: *` to create,
 * `If-Match: <ETag>` to replace. S3 decides each condition atomically, first to finish wins.
 *
 * The SDK retries a failed PutObject by itself (5xx, throttling, dropped connections; `maxAttempts`,
 * 3 by default), so a 412 may answer our own earlier attempt that committed while its response was
 * lost. That is safe: a refusal is only a value here, and the engine re-reads the record and compares its
 * owner and nonce before it believes it lost (src/engines/cas/adapter.ts).
 */
import type { LifecycleRule, S3Client } from '@aws-sdk/client-s3'
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'
import { causeText } from '../../core/errors.js'
import type { CasAdapter, CasListed, CasVersioned, CasWrite } from '../../engines/cas/adapter.js'
import { probeConditionalWrites, probeKey } from '../../engines/cas/doctor.js'
import { type ServerClock, withServerClock } from '../../engines/cas/fence.js'
import { listedNamePrefixes, readListedPage, storeUnavailable } from '../../engines/cas/objects.js'
import { lockObjectKey } from './layout.js'

/** The parts of `@aws-sdk/client-s3` the adapter uses (the module itself, loaded lazily: an optional peer dependency). */
export type S3Module = Pick<
  typeof import('@aws-sdk/client-s3'),
  | 'GetObjectCommand'
  | 'PutObjectCommand'
  | 'DeleteObjectCommand'
  | 'GetBucketLifecycleConfigurationCommand'
  | 'ListObjectsV2Command'
>

/**
 * Keys of any length map to names of at most 256 bytes (layout.ts) and the record does not hold the key,
 * so the core's usual key bound applies. Leases are observed on monotonic clocks and timers, so they stay
 * within a timer's range.
 */
/** How many pages of a listing (1000 objects each) doctor's count reads at most. */
const COUNT_PAGES = 10

/** The keys and ttls an S3 lock object can hold. */
export const S3_LIMITS: BackendLimits = { maxKeyBytes: 65_536, maxTtlMs: 2 ** 31 - 1 }

/** Where the adapter keeps its objects, and whether it owns the client. */
export interface S3Place {
  readonly client: S3Client
  readonly bucket: string
  /** Ends with '/' (or is ''); see layout.ts. */
  readonly prefix: string
  readonly id: string
  /** The client was made from a URL: `close` destroys it. A user's own client is never closed. */
  readonly owned: boolean
  readonly sdk: () => Promise<S3Module>
  /** Objects per page of a listing (`MaxKeys`). @default 1000 (S3's most) */
  readonly pageSize?: number | undefined
}

/** What an SDK error says: its HTTP status (none when no response came), its error code, the raw response's headers. */
interface S3ErrorShape {
  readonly name?: string
  readonly $metadata?: { readonly httpStatusCode?: number }
  readonly $response?: { readonly headers?: Record<string, string | undefined> }
}

const statusOf = (error: unknown): number | undefined => (error as S3ErrorShape)?.$metadata?.httpStatusCode
const nameOf = (error: unknown): string | undefined => (error as S3ErrorShape)?.name

/** A 404 about the object, not the bucket (NoSuchBucket is a setting to fix, never "no record"). */
const isNoSuchKey = (error: unknown) => statusOf(error) === 404 && nameOf(error) !== 'NoSuchBucket'

/**
 * A refused condition: 412 PreconditionFailed; 409 ConditionalRequestConflict (a concurrent write or delete
 * of the object committed during ours: S3 says re-read and retry, which is what the engine does on a
 * refusal); on a replace also 404 (the record is gone, so the version we hold is stale).
 */
const refused = (error: unknown, replace: boolean) => {
  const status = statusOf(error)
  return status === 412 || status === 409 || (replace && isNoSuchKey(error))
}

/**
 * Whether an enabled rule expires current objects that may be under `prefix`: its prefix and ours
 * overlap, and it asks for no tag (lock objects carry none).
 */
function expiresUnder(rule: LifecycleRule, prefix: string): boolean {
  if (rule.Status !== 'Enabled') return false
  if (rule.Expiration?.Days === undefined && rule.Expiration?.Date === undefined) return false
  const filter = rule.Filter
  if (filter?.Tag !== undefined || (filter?.And?.Tags?.length ?? 0) > 0) return false
  const ruled = filter?.And?.Prefix ?? filter?.Prefix ?? rule.Prefix ?? ''
  return prefix.startsWith(ruled) || ruled.startsWith(prefix)
}

/** The cas-lease engine's adapter over S3 (`s3Backend` builds one): one object per lock. */
export class S3CasAdapter implements CasAdapter {
  readonly id: string
  readonly limits = S3_LIMITS
  /** S3 sustains thousands of writes per second per prefix; 503 SlowDown is backed off by the engine. */
  readonly minWriteIntervalMs = 0
  readonly #place: S3Place

  constructor(place: S3Place) {
    this.#place = place
    this.id = place.id
  }

  read(key: string, signal: AbortSignal, clock?: ServerClock): Promise<CasVersioned | undefined> {
    return this.#get(this.#object(key).Key, key, signal, clock)
  }

  /**
   * ListObjectsV2 pages (up to 1,000 names each) of the names that may be keys starting with `prefix`
   * (src/engines/cas/objects.ts: the plain ones under it, and every hashed one), each object then read with
   * GetObject: one LIST per page and one GET per object, held or not.
   */
  async *list(prefix: string, signal: AbortSignal): AsyncGenerator<CasListed> {
    const { ListObjectsV2Command } = await this.#place.sdk()
    const { bucket, prefix: root, client, pageSize } = this.#place
    for (const names of listedNamePrefixes(prefix)) {
      let token: string | undefined
      // Page by page: a loop over the store's own continuation tokens, no retry, no timer.
      do {
        const out = await client
          .send(
            new ListObjectsV2Command({
              Bucket: bucket,
              Prefix: root + names,
              ContinuationToken: token,
              MaxKeys: pageSize,
            }),
            { abortSignal: signal },
          )
          .catch((error: unknown) => {
            throw this.#failure('ListObjectsV2', prefix, error, signal)
          })
        const page = (out.Contents ?? []).flatMap((o) => (o.Key ? [o.Key.slice(root.length)] : []))
        yield* readListedPage(page, (name) => this.#get(root + name, prefix, signal))
        token = out.IsTruncated ? out.NextContinuationToken : undefined
      } while (token !== undefined)
    }
  }

  create(key: string, body: string, signal: AbortSignal, clock?: ServerClock): Promise<CasWrite> {
    // `If-None-Match: *`: written only if no object has this key.
    return this.#put(key, body, { IfNoneMatch: '*' }, signal, clock)
  }

  replace(
    key: string,
    body: string,
    version: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasWrite> {
    // `If-Match: <ETag>`: written only if the object is still the one we read. Every body carries the
    // engine's nonce, so no two writes share an ETag (ETags are content hashes: equal bodies, equal tags).
    return this.#put(key, body, { IfMatch: version }, signal, clock)
  }

  /**
   * DeleteObject with `If-Match: <ETag>` (AWS general purpose buckets): 412 or 409 is a refusal (someone
   * wrote since); 404, or a 204 for an absent object, means it is gone. On a versioned bucket a delete
   * leaves a delete marker and the old versions (a lifecycle rule for noncurrent versions frees them).
   */
  async delete(key: string, version: string, signal: AbortSignal, clock?: ServerClock): Promise<boolean> {
    const { DeleteObjectCommand } = await this.#place.sdk()
    try {
      const command = new DeleteObjectCommand({ ...this.#object(key), IfMatch: version })
      await this.#place.client.send(withServerClock(command, clock), { abortSignal: signal })
      return true
    } catch (error) {
      if (isNoSuchKey(error)) return true
      if (refused(error, false)) return false
      throw this.#failure('DeleteObject', key, error, signal)
    }
  }

  async doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    const key = probeKey()
    const server = await this.#serverName(key, signal)
    try {
      const findings = await probeConditionalWrites(
        this,
        { key, server, createCondition: 'If-None-Match: *', replaceCondition: 'If-Match: <ETag>' },
        signal,
      )
      return [...findings, await this.#countFinding(signal), await this.#lifecycleFinding(signal)]
    } finally {
      await this.#remove(key, signal).catch(() => {})
    }
  }

  /**
   * How many lock objects the prefix holds (one per lock held or recently released), from a
   * listing of at most COUNT_PAGES pages; doctor's own probe objects are not counted.
   */
  async #countFinding(signal: AbortSignal): Promise<DoctorFinding> {
    const { ListObjectsV2Command } = await this.#place.sdk()
    const { bucket, prefix } = this.#place
    // Doctor's probe objects share one folder-like prefix: what precedes a probe key's last '/'.
    const sample = lockObjectKey(probeKey(), prefix)
    const probes = sample.slice(0, sample.lastIndexOf('/') + 1)
    let names = 0
    let pages = 0
    let token: string | undefined
    try {
      // Page by page, bounded: a loop over the store's continuation tokens, as `list`'s.
      do {
        const out = await this.#place.client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
          { abortSignal: signal },
        )
        names += (out.Contents ?? []).filter((o) => !o.Key?.startsWith(probes)).length
        token = out.IsTruncated ? out.NextContinuationToken : undefined
        pages++
      } while (token !== undefined && pages < COUNT_PAGES)
    } catch (error) {
      return { level: 'info', message: `lock names kept: not counted (listing refused: ${causeText(error)})` }
    }
    const count =
      token === undefined ? `${names}` : `at least ${names} (listing stopped after ${pages} pages)`
    return { level: 'info', message: `lock names kept: ${count} (objects under "${prefix}")` }
  }

  /**
   * Whether a lifecycle rule of the bucket expires lock objects. Fences survive it (src/engines/cas/fence.ts: rules
   * act a day or more after creation), but a held lock's record that expires ends its lease early: its
   * holder learns it at its next renewal, and meanwhile only fences keep a resource safe.
   */
  async #lifecycleFinding(signal: AbortSignal): Promise<DoctorFinding> {
    const { GetBucketLifecycleConfigurationCommand } = await this.#place.sdk()
    const { bucket, prefix } = this.#place
    let rules: readonly LifecycleRule[]
    try {
      const out = await this.#place.client.send(
        new GetBucketLifecycleConfigurationCommand({ Bucket: bucket }),
        {
          abortSignal: signal,
        },
      )
      rules = out.Rules ?? []
    } catch (error) {
      if (signal.aborted) throw signal.reason
      if (nameOf(error) !== 'NoSuchLifecycleConfiguration') {
        return {
          level: 'info',
          message: `${this.id}: could not read the bucket's lifecycle rules (${nameOf(error)}; s3:GetLifecycleConfiguration): check that none expires objects under "${prefix}"`,
        }
      }
      rules = []
    }
    const covering = rules.filter((rule) => expiresUnder(rule, prefix))
    if (covering.length === 0) {
      return { level: 'ok', message: `${this.id}: no lifecycle rule of the bucket expires lock objects` }
    }
    const names = covering.map((rule) => JSON.stringify(rule.ID ?? '(no id)')).join(', ')
    return {
      level: 'warn',
      message:
        `${this.id}: lifecycle rule ${names} of bucket "${bucket}" expires objects under "${prefix}": a held lock ` +
        'whose object expires loses its lease early (its holder learns it at its next renewal; fences stay ' +
        'above the deleted record and keep a fenced resource safe). Exclude the lock prefix from the rule',
    }
  }

  async close(): Promise<void> {
    if (this.#place.owned) this.#place.client.destroy()
  }

  /** The object `objectKey` (of lock `key`, or of a listing of `key` as a prefix), undefined when there is none. */
  async #get(
    objectKey: string,
    key: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasVersioned | undefined> {
    const { GetObjectCommand } = await this.#place.sdk()
    try {
      const get = withServerClock(new GetObjectCommand({ Bucket: this.#place.bucket, Key: objectKey }), clock)
      const out = await this.#place.client.send(get, { abortSignal: signal })
      const body = await out.Body?.transformToString('utf-8')
      if (body === undefined || !out.ETag) throw new Error('GetObject answered without a body or an ETag')
      return { body, version: out.ETag }
    } catch (error) {
      if (isNoSuchKey(error)) return undefined
      throw this.#failure('GetObject', key, error, signal)
    }
  }

  #object(key: string) {
    return { Bucket: this.#place.bucket, Key: lockObjectKey(key, this.#place.prefix) }
  }

  async #put(
    key: string,
    body: string,
    condition: { IfNoneMatch: string } | { IfMatch: string },
    signal: AbortSignal,
    clock: ServerClock | undefined,
  ): Promise<CasWrite> {
    const { PutObjectCommand } = await this.#place.sdk()
    const input = { ...this.#object(key), Body: body, ContentType: 'text/plain; charset=utf-8', ...condition }
    try {
      const put = withServerClock(new PutObjectCommand(input), clock)
      const out = await this.#place.client.send(put, { abortSignal: signal })
      if (!out.ETag) throw new Error('PutObject answered without an ETag')
      return { ok: true, version: out.ETag }
    } catch (error) {
      if (refused(error, 'IfMatch' in condition)) return { ok: false }
      throw this.#failure('PutObject', key, error, signal)
    }
  }

  /** The `Server` header of a 404 for the (still absent) probe object: names the store in doctor's findings. */
  async #serverName(key: string, signal: AbortSignal): Promise<string> {
    const { GetObjectCommand } = await this.#place.sdk()
    try {
      await this.#place.client.send(new GetObjectCommand(this.#object(key)), { abortSignal: signal })
    } catch (error) {
      if (!isNoSuchKey(error)) throw this.#failure('GetObject', key, error, signal)
      return (error as S3ErrorShape).$response?.headers?.server ?? 'unnamed'
    }
    return 'unnamed'
  }

  /** Deletes doctor's probe object, unconditionally (a lock's record is only ever deleted on its version). */
  async #remove(key: string, signal: AbortSignal): Promise<void> {
    const { DeleteObjectCommand } = await this.#place.sdk()
    await this.#place.client.send(new DeleteObjectCommand(this.#object(key)), { abortSignal: signal })
  }

  #failure(what: string, key: string, error: unknown, signal: AbortSignal): unknown {
    if (signal.aborted) return signal.reason
    // No credentials, or no region: the SDK fails before sending, and it will again until someone sets them.
    const setting = nameOf(error) === 'CredentialsProviderError' || /region is missing/i.test(String(error))
    return storeUnavailable(`S3 ${what}`, key, this.id, { status: statusOf(error), cause: error }, setting)
  }
}
