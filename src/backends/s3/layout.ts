/**
 * Where a lock lives in an S3 bucket, in one place: the adapter and the tests (breaking a lease, reading a
 * record behind the backend's back) both use these; nobody copies the naming.
 */
import { ELECTION_SEGMENT, objectNameOf } from '../../engines/cas/objects.js'

/** The prefix of every lock object unless the URL's path or the `prefix` option picks another. */
export const DEFAULT_PREFIX = 'fencelock/'

/**
 * The object key of lock `key`: `<prefix><name>`, the name being the key itself when it is plain
 * (letters, digits, '.', '_', '-' in '/'-separated segments, up to 256 bytes), else `~<sha256 hex>`.
 * One object per lock, deleted by fencelock only once released and the fence rule allows it (src/engines/cas/retire.ts).
 */
export const lockObjectKey = (key: string, prefix: string = DEFAULT_PREFIX): string =>
  `${prefix}${objectNameOf(key)}`

/** The prefix of the objects of elections: `<prefix>~election/`, where no lock's object can be (objects.ts). */
export const electionPrefix = (prefix: string = DEFAULT_PREFIX): string => `${prefix}${ELECTION_SEGMENT}`

/**
 * The object key of election `name`: `<prefix>~election/<name>`, the name as a lock's would be (plain, or
 * `~<sha256 hex>`). One object per election, held by its leader, retired like a lock's once released.
 */
export const electionObjectKey = (name: string, prefix: string = DEFAULT_PREFIX): string =>
  `${electionPrefix(prefix)}${objectNameOf(name)}`
