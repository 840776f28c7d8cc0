/**
 * The cas-lease adapter over DynamoDB: one item per lock, read with a strongly consistent GetItem, written
 * with a conditional PutItem. The version compared is an attribute of our own (a fresh random id per
 * write), so a refused write never depends on the record's text; a refusal brings the item as it is
 * (`ReturnValuesOnConditionCheckFailure: ALL_OLD`), which saves the engine the read that tells "someone
 * else wrote" from "my own earlier attempt won" (the SDK retries writes by itself).
 */
import { randomUUID } from 'node:crypto'
import type { AttributeValue, DynamoDBClient } from '@aws-sdk/client-dynamodb'
import { raceSignal } from '../../core/abort.js'
import type { BackendLimits, DoctorFinding } from '../../core/backend.js'
import { BackendUnavailableError, quoteKey } from '../../core/errors.js'
import type {
  CasAdapter,
  CasListed,
  CasTransact,
  CasTransactWrite,
  CasVersioned,
  CasWrite,
} from '../../engines/cas/adapter.js'
import { type ServerClock, withServerClock } from '../../engines/cas/fence.js'
import { runDoctor } from './doctor.js'
import { cancellation, describeFailure, isConditionFailed, isTableMissing } from './faults.js'
import {
  ATTR,
  createTableCommand,
  itemKey,
  MAX_KEY_BYTES,
  RESERVED_KEY_PREFIX,
  type TablePlace,
} from './layout.js'
import { createTable, type DynamoDbSdk } from './table.js'

/**
 * What DynamoDB can hold for us.
 * - Keys up to 2048 bytes: DynamoDB's limit for a partition key; the lock name is the key as is.
 * - Leases up to 2^31 - 1 ms (24.8 days): no limit of DynamoDB's (the lease length is text in the record),
 *   but waiters and holders time a lease with Node timers, which fire at once beyond that.
 * - No lock name starting with NUL: fencelock keeps its elections' items there (layout.ts).
 */
export const DYNAMODB_LIMITS: BackendLimits = {
  maxKeyBytes: MAX_KEY_BYTES,
  maxTtlMs: 2 ** 31 - 1,
  reservedKeyPrefix: RESERVED_KEY_PREFIX,
}

export interface DynamoDbCasAdapterOptions {
  readonly client: DynamoDBClient
  readonly table: string
  /** Create the table (on-demand) on first use when it does not exist. */
  readonly createTable: boolean
  /** Names the store in errors (`dynamodb://table?region=…`). */
  readonly id: string
  /** Whether we made the client (from a URL): `close` destroys only such a client. */
  readonly owned: boolean
  /** The endpoint when it is not AWS's (DynamoDB Local), for doctor's findings. */
  readonly endpoint?: string | undefined
  /** The SDK module, when the caller has loaded it already (fromUrl); else it is loaded on first use. */
  readonly sdk?: DynamoDbSdk | undefined
  /** Items a listing's Scan page evaluates (`Limit`). @default DynamoDB's: 1 MB of items */
  readonly pageSize?: number | undefined
  /**
   * What every `pk` of this adapter starts with, before the key: '' for the locks, `ELECTION_NAMESPACE`
   * for the elections (layout.ts). @default ''
   */
  readonly namespace?: string | undefined
}

type Item = Record<string, AttributeValue>

/** The actions one TransactWriteItems takes at most (DynamoDB's limit). */
const TRANSACT_LIMIT = 100

/** A write's condition: on no item at all (a create), or on the item's version attribute (a replace). */
interface Condition {
  readonly ConditionExpression: string
  readonly ExpressionAttributeNames: Record<string, string>
  readonly ExpressionAttributeValues?: Item
}

/**
 * DynamoDB's words for a request whose key is not the table's: another key name (`The provided key
 * element does not match the schema`), a number key (`Type mismatch for key`), a sort key too (`Missing
 * the key sk in the item` on a put; on a get, AWS: `does not match the schema`, DynamoDB Local: `The
 * number of conditions on the keys is invalid`).
 */
const KEY_SCHEMA_MISMATCH =
  /required keys|key element does not match the schema|type mismatch for key|missing the key|number of conditions on the keys/i

/** The record and version of an item; undefined when there is no item. */
function versioned(item: Item | undefined): CasVersioned | undefined {
  if (!item) return undefined
  // An item without our attributes (written by something else) reads as an empty record: the engine
  // treats a record it cannot parse as held, and its version "" never matches a replace.
  return { body: item[ATTR.record]?.S ?? '', version: item[ATTR.version]?.S ?? '' }
}

/** The cas-lease engine's adapter over DynamoDB (`dynamodbBackend` builds one): one item per lock. */
export class DynamoDbCasAdapter implements CasAdapter {
  readonly id: string
  readonly limits: BackendLimits
  /** DynamoDB sustains 1,000 writes a second on one partition: far above any lock's rate. */
  readonly minWriteIntervalMs = 0
  readonly #client: DynamoDBClient
  readonly #table: string
  readonly #createTable: boolean
  readonly #owned: boolean
  readonly #server: string
  readonly #endpoint: string | undefined
  readonly #pageSize: number | undefined
  readonly #loadSdk: () => Promise<DynamoDbSdk>
  #sdk: Promise<DynamoDbSdk> | undefined
  /** The table's creation, once started (every call that found it missing waits for the same one). */
  #creating: Promise<void> | undefined
  readonly #namespace: string

  constructor(options: DynamoDbCasAdapterOptions, loadSdk: () => Promise<DynamoDbSdk>) {
    this.#namespace = options.namespace ?? ''
    // In a namespace, names are shorter by its length, and may start with anything.
    this.limits =
      this.#namespace === ''
        ? DYNAMODB_LIMITS
        : {
            maxKeyBytes: MAX_KEY_BYTES - Buffer.byteLength(this.#namespace),
            maxTtlMs: DYNAMODB_LIMITS.maxTtlMs,
          }
    this.#client = options.client
    this.#table = options.table
    this.#createTable = options.createTable
    this.#owned = options.owned
    this.#server = options.endpoint ?? 'AWS DynamoDB'
    this.#endpoint = options.endpoint
    this.#pageSize = options.pageSize
    this.id = options.id
    this.#sdk = options.sdk ? Promise.resolve(options.sdk) : undefined
    this.#loadSdk = loadSdk
  }

  async read(key: string, signal: AbortSignal, clock?: ServerClock): Promise<CasVersioned | undefined> {
    const out = await this.#call(key, 'read', signal, (sdk) =>
      this.#client.send(
        withServerClock(
          new sdk.GetItemCommand({ TableName: this.#table, Key: this.#itemKey(key), ConsistentRead: true }),
          clock,
        ),
        { abortSignal: signal },
      ),
    )
    return versioned(out.Item)
  }

  /**
   * The items of keys starting with `prefix`: a strongly consistent Scan of the whole table, page by page
   * (1 MB each), filtered by `begins_with(pk, prefix)` on the server AFTER reading: the table's only key
   * is the partition key, so no Query can range over a prefix. Every item counts against the read
   * capacity, held or not, under the prefix or not. Never creates the table (a listing changes nothing).
   */
  async *list(prefix: string, signal: AbortSignal): AsyncGenerator<CasListed> {
    const sdk = await this.#sdkNow()
    const scanned = `${this.#namespace}${prefix}`
    const filter =
      scanned === ''
        ? {}
        : {
            FilterExpression: 'begins_with(#k, :p)',
            ExpressionAttributeNames: { '#k': ATTR.key },
            ExpressionAttributeValues: { ':p': { S: scanned } },
          }
    let start: Item | undefined
    // Page by page: a loop over the store's own LastEvaluatedKey, no retry, no timer.
    do {
      const scan = new sdk.ScanCommand({
        TableName: this.#table,
        ConsistentRead: true,
        ExclusiveStartKey: start,
        ...(this.#pageSize === undefined ? {} : { Limit: this.#pageSize }),
        ...filter,
      })
      const out = await this.#client.send(scan, { abortSignal: signal }).catch(async (error: unknown) => {
        if (signal.aborted) throw signal.reason
        throw await this.#unavailable(prefix, 'list', error, `the locks under ${quoteKey(prefix)}`)
      })
      for (const item of out.Items ?? []) {
        const pk = item[ATTR.key]?.S
        const current = versioned(item)
        // The locks' listing leaves out the items kept for other primitives (the reserved prefix).
        if (pk === undefined || !current || (this.#namespace === '' && pk.startsWith(RESERVED_KEY_PREFIX)))
          continue
        yield { key: pk.slice(this.#namespace.length), current }
      }
      start = out.LastEvaluatedKey
    } while (start !== undefined)
  }

  create(key: string, body: string, signal: AbortSignal, clock?: ServerClock): Promise<CasWrite> {
    return this.#put(key, body, writeCondition(undefined), signal, clock)
  }

  replace(
    key: string,
    body: string,
    version: string,
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasWrite> {
    return this.#put(key, body, writeCondition(version), signal, clock)
  }

  /** At most `TRANSACT_LIMIT` writes in one TransactWriteItems. */
  readonly transactLimit = TRANSACT_LIMIT

  /**
   * ONE TransactWriteItems of the writes' conditional Puts, each the PutItem `create` or `replace` would
   * send (a fresh version), all applied or none. Its idempotency token (the SDK fills `ClientRequestToken`
   * and keeps it across its own retries) makes a retry of a transaction that was applied answer success,
   * not a refusal. Cancelled for a failed condition (each such action's item as it is, `ALL_OLD`) or for
   * another transaction on an item: a refusal. Cancelled for throttling: a retryable failure.
   */
  async transact(
    writes: readonly CasTransactWrite[],
    signal: AbortSignal,
    clock?: ServerClock,
  ): Promise<CasTransact> {
    const versions = writes.map(() => randomUUID())
    const TransactItems = writes.map(({ key, body, version }, i) => ({
      Put: {
        TableName: this.#table,
        Item: this.#item(key, body, versions[i]!),
        ...writeCondition(version),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
      },
    }))
    try {
      await this.#call(writes[0]!.key, 'write', signal, (sdk) =>
        this.#client.send(withServerClock(new sdk.TransactWriteItemsCommand({ TransactItems }), clock), {
          abortSignal: signal,
        }),
      )
      return { ok: true, versions }
    } catch (error) {
      const reasons = cancellation(error)
      if (reasons === undefined) throw error
      const failed = reasons.flatMap(({ code, item }, index) =>
        code === 'ConditionalCheckFailed' ? [{ index, current: versioned(item as Item | undefined) }] : [],
      )
      return { ok: false, conflict: reasons.some(({ code }) => code === 'TransactionConflict'), failed }
    }
  }

  /**
   * DeleteItem conditioned on our version attribute: a refusal (another version, or no item: the
   * comparison is false then too) is false; the engine reads to tell them apart.
   */
  async delete(key: string, version: string, signal: AbortSignal, clock?: ServerClock): Promise<boolean> {
    try {
      await this.#call(key, 'delete', signal, (sdk) =>
        this.#client.send(
          withServerClock(
            new sdk.DeleteItemCommand({
              TableName: this.#table,
              Key: this.#itemKey(key),
              ConditionExpression: '#v = :v',
              ExpressionAttributeNames: { '#v': ATTR.version },
              ExpressionAttributeValues: { ':v': { S: version } },
            }),
            clock,
          ),
          { abortSignal: signal },
        ),
      )
      return true
    } catch (error) {
      if (isConditionFailed(error)) return false
      throw error
    }
  }

  async doctor(signal: AbortSignal): Promise<DoctorFinding[]> {
    return await runDoctor(this, {
      table: this.#table,
      place: { region: await this.#region(), endpoint: this.#endpoint },
      createTable: this.#createTable,
      server: this.#server,
      signal,
      send: async (make) => make(await this.#sdkNow(), this.#client, signal),
      ensureTable: (sdk) => this.#ensureTable(sdk),
    })
  }

  async close(): Promise<void> {
    if (this.#owned) this.#client.destroy()
  }

  /** One conditional PutItem of the whole item, with a fresh version; a refusal brings the item as it is. */
  async #put(
    key: string,
    body: string,
    condition: Condition,
    signal: AbortSignal,
    clock: ServerClock | undefined,
  ): Promise<CasWrite> {
    const version = randomUUID()
    try {
      await this.#call(key, 'write', signal, (sdk) =>
        this.#client.send(
          withServerClock(
            new sdk.PutItemCommand({
              TableName: this.#table,
              Item: this.#item(key, body, version),
              ...condition,
              ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
            }),
            clock,
          ),
          { abortSignal: signal },
        ),
      )
      return { ok: true, version }
    } catch (error) {
      if (!isConditionFailed(error)) throw error
      // No item on the refusal: it was deleted, or the server ignores ALL_OLD; the engine reads then.
      return { ok: false, current: versioned(error.Item as Item | undefined) }
    }
  }

  /** The whole item of lock `key`: its record text and a fresh `version`. */
  #item(key: string, body: string, version: string): Item {
    return { ...this.#itemKey(key), [ATTR.record]: { S: body }, [ATTR.version]: { S: version } }
  }

  /**
   * Runs one request. A refused condition passes through as is (the caller's refusal); an abort rethrows
   * its reason; anything else becomes a BackendUnavailableError.
   */
  async #call<T>(
    key: string,
    what: string,
    signal: AbortSignal,
    run: (sdk: DynamoDbSdk) => Promise<T>,
  ): Promise<T> {
    // Not a failure of the store: a missing SDK says what to install, as it is.
    const sdk = await this.#sdkNow()
    try {
      return await this.#withTable(sdk, signal, run)
    } catch (error) {
      if (signal.aborted) throw signal.reason
      // A refused condition, or a transaction cancelled only for conditions or another transaction.
      if (isConditionFailed(error) || cancellation(error) || error instanceof BackendUnavailableError) {
        throw error
      }
      throw await this.#unavailable(key, what, error)
    }
  }

  /**
   * Runs `run`; when the table is missing (and we may create it), creates it and runs it once more: a
   * request refused for want of a table wrote nothing, so making it again hides no outcome.
   */
  async #withTable<T>(
    sdk: DynamoDbSdk,
    signal: AbortSignal,
    run: (sdk: DynamoDbSdk) => Promise<T>,
  ): Promise<T> {
    try {
      return await run(sdk)
    } catch (error) {
      if (!this.#createTable || !isTableMissing(error)) throw error
      await raceSignal(this.#ensureTable(sdk), signal)
      return await run(sdk)
    }
  }

  /** The item key of `key` in this adapter's namespace. */
  #itemKey(key: string): { pk: { S: string } } {
    return itemKey(`${this.#namespace}${key}`)
  }

  #sdkNow(): Promise<DynamoDbSdk> {
    // A failed load is tried again on the next call (the error says what to install).
    this.#sdk ??= this.#loadSdk().catch((error: unknown) => {
      this.#sdk = undefined
      throw error
    })
    return this.#sdk
  }

  /**
   * Kept only while it runs: a table deleted later (by an operator, while locks are in use) is made
   * again by the next call that finds it missing. Its records' fences are not lost: each grant lifts the
   * fence to an epoch of the server's clock (src/engines/cas/fence.ts).
   */
  #ensureTable(sdk: DynamoDbSdk): Promise<void> {
    this.#creating ??= createTable(this.#client, sdk, this.#table).finally(() => {
      this.#creating = undefined
    })
    return this.#creating
  }

  /**
   * A failed request as a BackendUnavailableError. A missing table (ResourceNotFoundException: also a
   * table in another region or account than this client's) is not retryable, so the acquire fails at
   * once, naming the region the client looked in and the commands that create the table there.
   */
  async #unavailable(
    key: string,
    what: string,
    error: unknown,
    subject = `lock ${quoteKey(key)}`,
  ): Promise<BackendUnavailableError> {
    const { text, retryable } = describeFailure(error)
    let hint = ''
    if (isTableMissing(error)) {
      const region = await this.#region()
      const place = { region, endpoint: this.#endpoint }
      const where = `; table "${this.#table}" does not exist in region ${region ?? '(unknown)'}${this.#endpoint ? ` at ${this.#endpoint}` : ''}`
      hint = this.#createTable
        ? // Made by this adapter a moment ago (createTable on), and gone again already.
          `${where} although fencelock just created it (createTable on): something deletes it; check ` +
          `who, or create it yourself: ${createTableCommand(this.#table, place)}`
        : `${where} (a wrong region, account or table name looks the same). fencelock creates a table only ` +
          `when asked: ${createTableCommand(this.#table, place)}, or: fencelock doctor '${doctorUrl(this.#table, place)}', ` +
          'or let fencelock create it: createTable=true in the URL (`createTable: true` of dynamodbBackend)'
    } else if (KEY_SCHEMA_MISMATCH.test(text)) {
      hint = `; the table's key is not fencelock's (a string partition key "${ATTR.key}"): run fencelock doctor`
    }
    return new BackendUnavailableError(`Could not ${what} ${subject} on ${this.id}: ${text}${hint}`, {
      key,
      backend: this.id,
      cause: error,
      retryable,
    })
  }

  /** The client's region, when it has one (the SDK resolves it lazily; a missing one is its own error). */
  async #region(): Promise<string | undefined> {
    try {
      const region = (this.#client.config as { region?: () => Promise<string> }).region
      return typeof region === 'function' ? await region() : undefined
    } catch {
      return undefined
    }
  }
}

/**
 * The condition of a write of a lock's item: a create (`version` undefined) only where there is no item
 * for it at all, a replace only on the item's version attribute `version` (a missing item has no
 * version attribute, so the comparison is false then too).
 */
function writeCondition(version: string | undefined): Condition {
  if (version === undefined) {
    return { ConditionExpression: 'attribute_not_exists(#k)', ExpressionAttributeNames: { '#k': ATTR.key } }
  }
  return {
    ConditionExpression: '#v = :v',
    ExpressionAttributeNames: { '#v': ATTR.version },
    ExpressionAttributeValues: { ':v': { S: version } },
  }
}

/** The `fencelock doctor` URL that creates the table where this client looks. */
function doctorUrl(table: string, place: TablePlace): string {
  const query = [
    ...(place.region ? [`region=${place.region}`] : []),
    ...(place.endpoint ? [`endpoint=${place.endpoint}`] : []),
    'createTable=true',
  ]
  return `dynamodb://${table}?${query.join('&')}`
}
