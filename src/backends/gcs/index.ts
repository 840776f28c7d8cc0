/**
 * gs://bucket/prefix — a lock record per key in a Google Cloud Storage bucket, on the `cas-lease` engine
 * (src/engines/cas/engine.ts), with the generation preconditions gcslock and Vault's GCS HA lock use.
 *
 * - Layout: one object per lock, `<prefix><name>` (layout.ts: the key itself when plain, else
 *   `~<sha256 hex>`), holding the engine's record (owner, fence, lease length, state, holder, the key,
 *   a per-write nonce, the store's clock it was sent after) as its content, `Cache-Control: no-store`.
 *   Created with `ifGenerationMatch=0`, then only replaced with `ifGenerationMatch=<generation>`; a
 *   released one is deleted on its generation once the fence rule allows it (src/engines/cas/retire.ts).
 * - Expiry: observed, GCS has no TTL a lock could use: a waiter takes over only after it has seen the same
 *   generation for a whole lease plus a margin on its own monotonic clock (unlike Vault, which compares
 *   the writer's and the reader's wall clocks).
 * - Fence: a counter in the record, advanced by the same conditional write that grants the lock; never
 *   the generation, whose order GCS no longer documents. A release marks the record released. Each
 *   grant also lifts it to an epoch of GCS's clock (src/engines/cas/fence.ts), so an object deleted
 *   behind our back (a lifecycle rule, `gcloud storage rm`) is made again above its old fences; doctor
 *   warns about lifecycle Delete rules that cover the prefix.
 * - Waiting: GCS cannot notify; the engine polls the record, its interval growing and capped.
 * - Limits: keys up to 64 KiB (object names stay under 256 bytes, layout.ts). About one write per second per object
 *   (`minWriteIntervalMs: 1000`): heartbeats and takeovers never write faster, and 429 is backed off; so
 *   ttls are at least 3 s (renewals come every ttl/3), shorter ones are refused with a `TypeError`.
 *   The SDK retries conditional uploads itself (`autoRetry`, `RetryConditional`): safe, the engine re-reads
 *   after any unknown or refused outcome.
 *
 * - List and break: objects.list pages of the prefix (and of every hashed `~` name, whose record names
 *   its key), a media GET per object listed; a break is the engine's (a release's write, no owner check).
 * - Election: the engine again over `<prefix>~election/` (layout.ts), where no lock object can be: the
 *   record carries the leader's value; observers read it once a second (src/engines/cas/election.ts).
 *   A proclaim is a write, paced with the renewals at GCS's one write a second per object.
 *
 * Files: adapter.ts (the CasAdapter: media GET, conditional uploads, objects.list for list, doctor's
 * probe), layout.ts (object names, shared with the tests).
 */
import type { Storage } from '@google-cloud/storage'
import type { LockBackend } from '../../core/backend.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { casLeaseBackend } from '../../engines/cas/backend.js'
import { objectPrefix } from '../../engines/cas/objects.js'
import { GcsCasAdapter } from './adapter.js'
import { DEFAULT_PREFIX, electionPrefix } from './layout.js'

export { GCS_LIMITS, GcsCasAdapter } from './adapter.js'
export { DEFAULT_PREFIX, electionObjectName, lockObjectName } from './layout.js'

/** What `gcsBackend` is told. */
export interface GcsBackendOptions {
  /** Your `Storage` of @google-cloud/storage 7.x (credentials and project as you configured them). */
  readonly client: Storage
  /** The bucket the lock objects live in (it must exist). */
  readonly bucket: string
  /** Prefix of every lock object; a '/' is added when missing. @default 'fencelock/' */
  readonly prefix?: string | undefined
  /** Names the store in errors; defaults to `gs://<bucket>/<prefix>`. */
  readonly id?: string | undefined
}

/** The engine over the bucket: its locks' adapter, and its elections' (layout.ts). */
function gcsEngine(options: GcsBackendOptions): LockBackend {
  const { client: storage, bucket } = options
  if (!storage || typeof (storage as { bucket?: unknown }).bucket !== 'function') {
    throw new TypeError('Expected `client` to be a Storage of @google-cloud/storage')
  }
  if (typeof bucket !== 'string' || bucket === '')
    throw new TypeError('Expected `bucket` to be a bucket name')
  const prefix = objectPrefix(options.prefix, DEFAULT_PREFIX)
  const id = options.id ?? `gs://${bucket}/${prefix}`
  const elections = new GcsCasAdapter({ storage, bucket, prefix: electionPrefix(prefix), id })
  return casLeaseBackend(new GcsCasAdapter({ storage, bucket, prefix, id }), {}, elections)
}

/**
 * A lock backend in a GCS bucket, over your own client.
 * @example
 * import { Storage } from '@google-cloud/storage'
 * const locks = createLockClient(gcsBackend({ client: new Storage(), bucket: 'my-locks' }), { ttl: '30s' })
 */
export function gcsBackend(options: GcsBackendOptions): LockBackend {
  return gcsEngine(options)
}

/** The URL parameters of gs:// (its page in docs/backends/ is tested against this). */
export const PARAMS = {
  endpoint: {
    type: 'string',
    doc: 'another server speaking the GCS JSON API (an emulator), e.g. http://127.0.0.1:4443',
  },
  project: { type: 'string', doc: "the project id (default: the SDK's, e.g. GOOGLE_CLOUD_PROJECT)" },
} as const satisfies ParamSchema

/**
 * `gs://bucket[/prefix][?endpoint=http://host:4443&project=my-project]`. Credentials come from Google's
 * application default credentials; none go in the URL.
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const module = await loadDriver('@google-cloud/storage', 'gcs', url, () => import('@google-cloud/storage'))
  const params = readParams(url, PARAMS)
  if (url.username || url.password) {
    throw new TypeError(
      `Expected no credentials in ${redact(url)}: application default credentials provide them`,
    )
  }
  const bucket = decodeURIComponent(url.hostname)
  if (!bucket) throw new TypeError(`Expected a bucket in ${redact(url)}, e.g. gs://my-locks/app`)
  const storage = new module.Storage({
    ...(params.endpoint === undefined ? {} : { apiEndpoint: params.endpoint }),
    ...(params.project === undefined ? {} : { projectId: params.project }),
  })
  const prefix = decodeURIComponent(url.pathname)
  return gcsEngine({ client: storage, bucket, prefix, id: redact(url) })
}
