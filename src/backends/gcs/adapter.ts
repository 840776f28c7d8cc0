/**
 * The GCS adapter of the `cas-lease` engine: one object per lock; its version is the object's generation.
 * Read = one media GET (`alt=media`), whose `x-goog-generation` header names the generation of exactly the
 * bytes it returns (strongly consistent). Create = upload with `ifGenerationMatch=0` (only if no live
 * object); replace = upload with `ifGenerationMatch=<generation>`. GCS decides each condition atomically.
 *
 * `@google-cloud/storage` retries an upload that carries a precondition by itself (its default
 * `RetryConditional` idempotency strategy, on 408/429/5xx and dropped connections), so a 412 may answer
 * our own earlier attempt that committed while its response was lost. That is safe: a refusal is only a
 * value here, and the engine re-reads the record and compares its owner and nonce.
 */
import type { File, Storage } from '@google-cloud/storage'
import { raceSignal } from '../../core/abort.js'
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'
import { causeText } from '../../core/errors.js'
import type { CasAdapter, CasListed, CasVersioned, CasWrite } from '../../engines/cas/adapter.js'
import { probeConditionalWrites, probeKey } from '../../engines/cas/doctor.js'
import { httpDateSeconds, noteClock, type ServerClock } from '../../engines/cas/fence.js'
import { listedNamePrefixes, readListedPage, storeUnavailable } from '../../engines/cas/objects.js'
import { lockObjectName } from './layout.js'

/** How many pages of a listing (1000 objects each) doctor's count reads at most. */
const COUNT_PAGES = 10

/** GCS sustains about one write per second to one object name; faster may get 429 (cloud.google.com/storage/quotas). */
const MIN_WRITE_INTERVAL_MS = 1000

/**
 * As S3's: names are at most 256 bytes whatever the key (layout.ts); leases within a timer's range. At
 * least three write intervals: renewals come every ttl/3, so a shorter lease has its renewals paced past
 * its end and is lost (an 800 ms or 1.2 s ttl: every time); at three, a renewal refused with 429 still has
 * two thirds of the lease to be sent again.
 */
export const GCS_LIMITS: BackendLimits = {
  maxKeyBytes: 65_536,
  maxTtlMs: 2 ** 31 - 1,
  minTtlMs: 3 * MIN_WRITE_INTERVAL_MS,
  // An attempt may wait one write interval for the object's write rate, then read and write.
  minAttemptMs: 2 * MIN_WRITE_INTERVAL_MS,
}

/** Where the adapter keeps its objects, and whether it owns the client. */
export interface GcsPlace {
  readonly storage: Storage
  readonly bucket: string
  /** Ends with '/' (or is ''); see layout.ts. */
  readonly prefix: string
  readonly id: string
  /** Objects per page of a listing (`maxResults`). @default 1000 (GCS's most) */
  readonly pageSize?: number | undefined
}

/** `ApiError.code` is the HTTP status; network errors carry a string code (ECONNREFUSED) instead. */
const statusOf = (error: unknown): number | undefined => {
  const code = (error as { code?: unknown })?.code
  return typeof code === 'number' ? code : undefined
}

/**
 * A 404 about the bucket, not the object: a setting to fix, never "no record". GCS tells them apart only
 * in words ("The specified bucket does not exist." against "No such object: …"), both reason `notFound`.
 */
const noBucket = (error: unknown) =>
  statusOf(error) === 404 && /bucket does not exist/i.test(String((error as Error)?.message))

/** A 404 about the object: no record. */
const noObject = (error: unknown) => statusOf(error) === 404 && !noBucket(error)

/**
 * A refused condition: 412 conditionNotMet; 409 (contention, the engine re-reads); on a replace also 404
 * (the object is gone, so the generation we hold is stale).
 */
const refused = (error: unknown, replace: boolean) => {
  const status = statusOf(error)
  return status === 412 || status === 409 || (replace && noObject(error))
}

/** A response header from the SDK's response object (a plain object of lower-case names, or a Headers). */
function headerOf(response: unknown, name: string): string | undefined {
  const headers = (response as { headers?: unknown })?.headers
  if (headers && typeof (headers as Headers).get === 'function')
    return (headers as Headers).get(name) ?? undefined
  const value = (headers as Record<string, string | string[] | undefined> | undefined)?.[name]
  return Array.isArray(value) ? value[0] : value
}

/**
 * The object's bytes and the generation the same response names: one request, so they belong together.
 * The response's `Date` (also a 404's) goes to `clock`.
 */
function download(file: File, signal: AbortSignal, clock: ServerClock | undefined): Promise<CasVersioned> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let generation: string | undefined
    const stream = file.createReadStream()
    // Never destroyed before its response: the SDK pipes the response into this stream right after the
    // 'response' event, and a destroyed one makes it throw ERR_STREAM_UNABLE_TO_PIPE where nobody can catch
    // it (an unhandled rejection). An abort before the response destroys it a turn after the response; the
    // caller has its rejection at once anyway (#download races the signal).
    let responded = false
    const destroy = () => stream.destroy(signal.reason)
    const onAbort = () => (responded ? destroy() : undefined)
    signal.addEventListener('abort', onAbort, { once: true })
    const settle = () => signal.removeEventListener('abort', onAbort)
    stream.on('response', (response: unknown) => {
      responded = true
      generation = headerOf(response, 'x-goog-generation')
      noteClock(clock, httpDateSeconds(headerOf(response, 'date')))
      if (signal.aborted) setImmediate(destroy)
    })
    stream.on('data', (chunk: Buffer) => chunks.push(chunk))
    stream.on('error', (error) => {
      settle()
      reject(error)
    })
    stream.on('end', () => {
      settle()
      if (generation === undefined) reject(new Error('the media GET answered without x-goog-generation'))
      else resolve({ body: Buffer.concat(chunks).toString('utf8'), version: generation })
    })
  })
}

/** The parts of a bucket's lifecycle rule that say whether it deletes lock objects. */
interface GcsLifecycleRule {
  readonly action?: { readonly type?: string }
  readonly condition?: {
    readonly matchesPrefix?: readonly string[]
    readonly matchesSuffix?: readonly string[]
  }
}

/**
 * Whether a `Delete` rule may delete objects under `prefix`: it names no prefix, or one that overlaps
 * ours. A rule limited by suffixes is left out (lock names rarely end that way; doctor cannot tell).
 */
function deletesUnder(rule: GcsLifecycleRule, prefix: string): boolean {
  if (rule.action?.type !== 'Delete') return false
  if ((rule.condition?.matchesSuffix?.length ?? 0) > 0) return false
  const prefixes = rule.condition?.matchesPrefix ?? []
  return prefixes.length === 0 || prefixes.some((p) => prefix.startsWith(p) || p.startsWith(prefix))
}

/** The cas-lease engine's adapter over GCS (`gcsBackend` builds one): one object per lock. */
export class GcsCasAdapter implements CasAdapter {
  readonly id: string
  readonly limits = GCS_LIMITS
  readonly minWriteIntervalMs = MIN_WRITE_INTERVAL_MS
  readonly #place: GcsPlace

  constructor(place: GcsPlace) {
    this.#place = place
    this.id = place.id
  }

  read(key: string, signal: AbortSignal, clock?: ServerClock): Promise<CasVersioned | undefined> {
    return this.#download(this.#file(key), key, signal, clock)
  }

  /**
   * objects.list pages (up to 1,000 names each) of the names that may be keys starting with `prefix`
   * (src/engines/cas/objects.ts: the plain ones under it, and every hashed one), each object then read with a media
   * GET: one list request per page and one GET per object, held or not.
   */
  async *list(prefix: string, signal: AbortSignal): AsyncGenerator<CasListed> {
    const { storage, bucket, prefix: root, pageSize } = this.#place
    const objects = storage.bucket(bucket)
    for (const names of listedNamePrefixes(prefix)) {
      let pageToken: string | undefined
      // Page by page: a loop over the store's own page tokens, no retry, no timer.
      do {
        const query = {
          prefix: root + names,
          maxResults: pageSize ?? 1000,
          autoPaginate: false,
          ...(pageToken === undefined ? {} : { pageToken }),
        }
        const [files, next] = await raceSignal(objects.getFiles(query), signal).catch((error: unknown) => {
          throw this.#failure('objects.list', prefix, error, signal)
        })
        const page = files.map((file) => file.name.slice(root.length))
        yield* readListedPage(page, (name) => this.#download(objects.file(root + name), prefix, signal))
        pageToken = (next as { pageToken?: string } | null)?.pageToken
      } while (pageToken !== undefined)
    }
  }

  create(key: string, body: string, signal: AbortSignal, clock?: ServerClock): Promise<CasWrite> {
    // Generation 0 stands for "no live object": written only if there is none.
    return this.#upload(key, body, 0, signal, clock)
  }

  replace(
    key: string,
    body: string,
    version: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasWrite> {
    // Written only if the live object is still the generation we read.
    return this.#upload(key, body, version, signal, clock)
  }

  /**
   * objects.delete with `ifGenerationMatch=<generation>`: 412 (or 409) is a refusal (someone wrote since),
   * 404 means it is gone. The SDK retries a delete with a generation precondition (idempotent): a retry
   * after one that was applied answers 404, gone.
   */
  async delete(key: string, version: string, signal: AbortSignal, clock?: ServerClock): Promise<boolean> {
    try {
      const [response] = await raceSignal(this.#file(key).delete({ ifGenerationMatch: version }), signal)
      noteClock(clock, httpDateSeconds(headerOf(response, 'date')))
      return true
    } catch (error) {
      if (noObject(error) && !signal.aborted) return true
      if (refused(error, false) && !signal.aborted) return false
      throw this.#failure('objects.delete', key, error, signal)
    }
  }

  async doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    const key = probeKey()
    try {
      const findings = await probeConditionalWrites(
        this,
        {
          key,
          server: this.#place.storage.apiEndpoint,
          createCondition: 'ifGenerationMatch=0',
          replaceCondition: 'ifGenerationMatch=<generation>',
        },
        signal,
      )
      return [...findings, await this.#countFinding(signal), await this.#lifecycleFinding(signal)]
    } finally {
      // Doctor's own probe object, unconditionally (a lock's object is only ever deleted on its generation).
      await raceSignal(this.#file(key).delete({ ignoreNotFound: true }), signal).catch(() => {})
    }
  }

  /**
   * How many lock objects the prefix holds (one per lock held or recently released: released ones are
   * retired, src/engines/cas/retire.ts), from at most COUNT_PAGES pages of a listing; doctor's own probes not counted.
   */
  async #countFinding(signal: AbortSignal): Promise<DoctorFinding> {
    const { storage, bucket, prefix } = this.#place
    const sample = lockObjectName(probeKey(), prefix)
    const probes = sample.slice(0, sample.lastIndexOf('/') + 1)
    let names = 0
    let pages = 0
    let pageToken: string | undefined
    try {
      // Page by page, bounded: a loop over the store's own page tokens, as `list`'s.
      do {
        const query = { prefix, maxResults: 1000, autoPaginate: false, ...(pageToken ? { pageToken } : {}) }
        const [files, next] = await raceSignal(storage.bucket(bucket).getFiles(query), signal)
        names += files.filter((file) => !file.name.startsWith(probes)).length
        pageToken = (next as { pageToken?: string } | null)?.pageToken
        pages++
      } while (pageToken !== undefined && pages < COUNT_PAGES)
    } catch (error) {
      return { level: 'info', message: `lock names kept: not counted (listing refused: ${causeText(error)})` }
    }
    const count =
      pageToken === undefined ? `${names}` : `at least ${names} (listing stopped after ${pages} pages)`
    return { level: 'info', message: `lock names kept: ${count} (objects under "${prefix}")` }
  }

  /**
   * Whether a lifecycle `Delete` rule of the bucket may delete lock objects. Fences survive it
   * (src/engines/cas/fence.ts), but a held lock's object deleted ends its lease early: its holder learns it at its
   * next renewal, and meanwhile only fences keep a resource safe.
   */
  async #lifecycleFinding(signal: AbortSignal): Promise<DoctorFinding> {
    const { bucket, prefix } = this.#place
    let rules: readonly GcsLifecycleRule[]
    try {
      const [metadata] = await raceSignal(this.#place.storage.bucket(bucket).getMetadata(), signal)
      rules = (metadata.lifecycle?.rule ?? []) as readonly GcsLifecycleRule[]
    } catch (error) {
      if (signal.aborted) throw signal.reason
      return {
        level: 'info',
        message: `${this.id}: could not read the bucket's lifecycle rules (HTTP ${statusOf(error) ?? 'error'}; storage.buckets.get): check that none deletes objects under "${prefix}"`,
      }
    }
    const covering = rules.filter((rule) => deletesUnder(rule, prefix))
    if (covering.length === 0) {
      return { level: 'ok', message: `${this.id}: no lifecycle rule of the bucket deletes lock objects` }
    }
    return {
      level: 'warn',
      message:
        `${this.id}: ${covering.length} lifecycle Delete rule(s) of bucket "${bucket}" may delete objects under ` +
        `"${prefix}": a held lock whose object is deleted loses its lease early (its holder learns it at its ` +
        'next renewal; fences stay above the deleted record and keep a fenced resource safe). Add a ' +
        'matchesPrefix that leaves the lock prefix out',
    }
  }

  /** `Storage` holds no connection of its own to close (its HTTP agent's sockets time out idle). */
  async close(): Promise<void> {}

  /** The object `file` (of lock `key`, or of a listing of `key` as a prefix), undefined when there is none. */
  async #download(
    file: File,
    key: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasVersioned | undefined> {
    try {
      return await raceSignal(download(file, signal, clock), signal)
    } catch (error) {
      if (noObject(error) && !signal.aborted) return undefined
      throw this.#failure('media GET', key, error, signal)
    }
  }

  #file(key: string): File {
    return this.#place.storage.bucket(this.#place.bucket).file(lockObjectName(key, this.#place.prefix))
  }

  async #upload(
    key: string,
    body: string,
    generation: 0 | string,
    signal: AbortSignal,
    clock: ServerClock | undefined,
  ): Promise<CasWrite> {
    const file = this.#file(key)
    const save = file.save(body, {
      // One request (a multipart upload): a resumable session would cost two for a record this small.
      resumable: false,
      // Off on purpose: on a checksum mismatch the SDK sends an *unconditional* DELETE of the object it
      // just wrote, which would remove a lock's record and restart its fence. The record is tiny and the
      // engine reads it back whenever an outcome is in doubt.
      validation: false,
      // `no-store`: GCS serves cacheable public objects from caches; a lock record must never be stale.
      metadata: { contentType: 'text/plain; charset=utf-8', cacheControl: 'no-store' },
      preconditionOpts: { ifGenerationMatch: generation },
    })
    try {
      await raceSignal(save, signal)
    } catch (error) {
      if (refused(error, generation !== 0) && !signal.aborted) return { ok: false }
      throw this.#failure('upload', key, error, signal)
    }
    // The SDK keeps the object resource the upload returned.
    const written = file.metadata.generation
    if (written === undefined)
      throw this.#failure('upload', key, new Error('no generation in the answer'), signal)
    // The server's clock at the write: the object's `updated` time, which GCS sets when it commits.
    const updated = Date.parse(String(file.metadata.updated))
    noteClock(clock, Number.isFinite(updated) ? Math.floor(updated / 1000) : undefined)
    return { ok: true, version: String(written) }
  }

  #failure(what: string, key: string, error: unknown, signal: AbortSignal): unknown {
    if (signal.aborted) return signal.reason
    if (noBucket(error)) {
      const { bucket } = this.#place
      const missing = new Error(
        `bucket "${bucket}" does not exist: create it (gcloud storage buckets create gs://${bucket}) or fix the URL`,
        { cause: error },
      )
      return storeUnavailable(`GCS ${what}`, key, this.id, { status: 404, cause: missing }, true)
    }
    // No credentials found: it fails again until someone provides them.
    const setting = /default credentials|invalid_grant|unauthorized_client/i.test(String(error))
    return storeUnavailable(`GCS ${what}`, key, this.id, { status: statusOf(error), cause: error }, setting)
  }
}
