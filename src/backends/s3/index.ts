/**
 * s3://bucket/prefix — a lock record per key in an S3 bucket (or an S3-compatible store that enforces
 * conditional writes), on the `cas-lease` engine (src/engines/cas/engine.ts).
 *
 * - Layout: one object per lock, `<prefix><name>` (layout.ts: the key itself when plain, else
 *   `~<sha256 hex>`), holding the engine's record (owner, fence, lease length, state, holder, the key,
 *   a per-write nonce, the store's clock it was sent after). Created with `If-None-Match: *`, then only
 *   replaced with `If-Match: <ETag>`; a released one is deleted with `If-Match: <ETag>` of its last write
 *   once the fence rule allows it (src/engines/cas/retire.ts): the bucket keeps the locks held or recently
 *   released.
 * - Expiry: observed, S3 has no TTL a lock could use: a waiter takes over only after it has seen the same
 *   ETag for a whole lease plus a margin on its own monotonic clock; no wall clock is trusted.
 * - Fence: a counter in the record, advanced by the same conditional write that grants the lock. Each
 *   write extends one chain of `If-Match` writes and a release marks the record released, so the fence
 *   only grows; each grant also lifts it to an epoch of S3's clock (the `Date` of the deciding read,
 *   src/engines/cas/fence.ts), so an object deleted behind our back (a lifecycle rule, `aws s3 rm`) is
 *   made again above its old fences. doctor warns about lifecycle rules that expire lock objects.
 * - Waiting: S3 cannot notify; the engine polls the record, its interval growing and capped.
 * - Limits: keys up to 64 KiB (object names stay under 256 bytes, layout.ts). S3 has no per-object write
 *   limit to respect (503 SlowDown is backed off). The SDK's own retries (`maxAttempts`, 3 by default) are
 *   safe: the engine re-reads after any unknown or refused outcome. S3 Express One Zone (directory
 *   buckets) works the same way but needs a virtual-hosted client; it is not tested.
 *
 * - List and break: ListObjectsV2 pages of the prefix (and of every hashed `~` name, whose record names
 *   its key), a GetObject per object listed; a break is the engine's (a release's write, no owner check).
 * - Election: the engine again over `<prefix>~election/` (layout.ts), where no lock object can be: the
 *   record carries the leader's value; observers read it once a second (src/engines/cas/election.ts).
 *
 * Files: adapter.ts (the CasAdapter: GetObject, conditional PutObject, ListObjectsV2 for list, doctor's
 * probe), layout.ts (object names, shared with the tests).
 */
import type { S3Client } from '@aws-sdk/client-s3'
import type { LockBackend } from '../../core/backend.js'
import { loadDriver, type ParamSchema, readParams, redact } from '../../core/url.js'
import { casLeaseBackend } from '../../engines/cas/backend.js'
import { objectPrefix } from '../../engines/cas/objects.js'
import { S3CasAdapter, type S3Module } from './adapter.js'
import { DEFAULT_PREFIX, electionPrefix } from './layout.js'

export { S3_LIMITS, S3CasAdapter } from './adapter.js'
export { DEFAULT_PREFIX, electionObjectKey, lockObjectKey } from './layout.js'

/** What `s3Backend` is told. */
export interface S3BackendOptions {
  /** Your `S3Client` (credentials and region as you configured them). fencelock never closes it. */
  readonly client: S3Client
  /** The bucket the lock objects live in (it must exist). */
  readonly bucket: string
  /** Prefix of every lock object; a '/' is added when missing. @default 'fencelock/' */
  readonly prefix?: string | undefined
  /** Names the store in errors; defaults to `s3://<bucket>/<prefix>`. */
  readonly id?: string | undefined
}

/** The SDK module, loaded once and only when a backend first needs it (an optional peer dependency). */
let sdk: Promise<S3Module> | undefined
const loadSdk = (): Promise<S3Module> => {
  sdk ??= import('@aws-sdk/client-s3')
  return sdk
}

/** The engine over the bucket: its locks' adapter, and its elections' (layout.ts), which never closes the client. */
function s3Engine(options: S3BackendOptions, owned: boolean, module: () => Promise<S3Module>): LockBackend {
  const { client, bucket } = options
  if (!client || typeof (client as { send?: unknown }).send !== 'function') {
    throw new TypeError('Expected `client` to be an S3Client of @aws-sdk/client-s3')
  }
  if (typeof bucket !== 'string' || bucket === '')
    throw new TypeError('Expected `bucket` to be a bucket name')
  const prefix = objectPrefix(options.prefix, DEFAULT_PREFIX)
  const id = options.id ?? `s3://${bucket}/${prefix}`
  const elections = new S3CasAdapter({
    client,
    bucket,
    prefix: electionPrefix(prefix),
    id,
    owned: false,
    sdk: module,
  })
  return casLeaseBackend(new S3CasAdapter({ client, bucket, prefix, id, owned, sdk: module }), {}, elections)
}

/**
 * A lock backend in an S3 bucket, over your own client.
 * @example
 * import { S3Client } from '@aws-sdk/client-s3'
 * const locks = createLockClient(s3Backend({ client: new S3Client({}), bucket: 'my-locks' }), { ttl: '30s' })
 */
export function s3Backend(options: S3BackendOptions): LockBackend {
  return s3Engine(options, false, loadSdk)
}

/** The URL parameters of s3:// (its page in docs/backends/ is tested against this). */
export const PARAMS = {
  region: { type: 'string', doc: "the bucket's region (default: the SDK's chain, e.g. AWS_REGION)" },
  endpoint: { type: 'string', doc: 'an S3-compatible server instead of AWS, e.g. http://127.0.0.1:9000' },
  forcePathStyle: {
    type: 'bool',
    default: false,
    doc: 'address the bucket in the path (/bucket/key), as most S3-compatible servers need',
  },
} as const satisfies ParamSchema

/**
 * `s3://bucket[/prefix][?region=eu-west-1&endpoint=http://host:9000&forcePathStyle=true]`. Credentials come
 * from the SDK's default chain (environment, shared files, SSO, instance roles); none go in the URL.
 */
export async function fromUrl(url: URL): Promise<LockBackend> {
  const module = await loadDriver('@aws-sdk/client-s3', 's3', url, () => import('@aws-sdk/client-s3'))
  const params = readParams(url, PARAMS)
  if (url.username || url.password) {
    throw new TypeError(`Expected no credentials in ${redact(url)}: the SDK's default chain provides them`)
  }
  const bucket = decodeURIComponent(url.hostname)
  if (!bucket) throw new TypeError(`Expected a bucket in ${redact(url)}, e.g. s3://my-locks/app`)
  const client = new module.S3Client({
    ...(params.region === undefined ? {} : { region: params.region }),
    ...(params.endpoint === undefined ? {} : { endpoint: params.endpoint }),
    forcePathStyle: params.forcePathStyle,
  })
  try {
    const prefix = decodeURIComponent(url.pathname)
    return s3Engine({ client, bucket, prefix, id: redact(url) }, true, async () => module)
  } catch (error) {
    client.destroy()
    throw error
  }
}
