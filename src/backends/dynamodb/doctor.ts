/**
 * `fencelock doctor` on DynamoDB: the table exists with fencelock's key, and the server enforces the
 * conditions every grant relies on, proved on a probe item of its own by the engine's probe (a DynamoDB
 * look-alike that ignored condition expressions would let two holders in at once).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb'
import type { DoctorFinding } from '../../core/backend.js'
import type { CasAdapter, CasWrite } from '../../engines/cas/adapter.js'
import { probeConditionalWrites, probeKey } from '../../engines/cas/doctor.js'
import type { ServerClock } from '../../engines/cas/fence.js'
import { describeFailure, isTableMissing } from './faults.js'
import { createTableCommand, itemKey, type TablePlace } from './layout.js'
import { type DynamoDbSdk, schemaProblem } from './table.js'

export interface DoctorTools {
  readonly table: string
  /** The client's region and non-AWS endpoint, for the command that creates the table. */
  readonly place: TablePlace
  /** Create the table when it is missing: only when the user asked (`createTable=true`). */
  readonly createTable: boolean
  /** Names the server in findings (its endpoint, or "AWS DynamoDB"). */
  readonly server: string
  readonly signal: AbortSignal
  /** Runs one SDK call with the adapter's client and SDK module. */
  send<T>(make: (sdk: DynamoDbSdk, client: DynamoDBClient, signal: AbortSignal) => Promise<T>): Promise<T>
  /** Creates the table if missing (the adapter's own, shared with its first use). */
  ensureTable(sdk: DynamoDbSdk): Promise<void>
}

/** The table: exists (or is created now, when allowed) with the right key. False when the probes cannot run. */
async function checkTable(tools: DoctorTools, findings: DoctorFinding[]): Promise<boolean> {
  const { table } = tools
  try {
    const { Table } = await tools.send((sdk, client, signal) =>
      client.send(new sdk.DescribeTableCommand({ TableName: table }), { abortSignal: signal }),
    )
    const problem = Table ? schemaProblem(Table) : 'DynamoDB described no table'
    if (problem) {
      findings.push({
        level: 'error',
        message: `Table "${table}": ${problem} (${createTableCommand(table, tools.place)})`,
      })
      return false
    }
    const billing = Table?.BillingModeSummary?.BillingMode ?? 'PROVISIONED'
    findings.push({
      level: 'ok',
      message:
        `Table "${table}": key "pk" (string), ${billing}, ${Table?.TableStatus}; lock names kept: about ` +
        `${Table?.ItemCount ?? '?'} (its ItemCount, which DynamoDB refreshes about every six hours)`,
    })
    return true
  } catch (error) {
    if (!isTableMissing(error)) {
      // Some policies allow item calls but not DescribeTable: the probes below still say what matters.
      const { text } = describeFailure(error)
      findings.push({
        level: 'warn',
        message: `Could not describe table "${table}" (key not checked): ${text}`,
      })
      return true
    }
    if (!tools.createTable) {
      findings.push({
        level: 'error',
        message:
          `Table "${table}" does not exist in region ${tools.place.region ?? '(unknown)'}; create it with: ` +
          `${createTableCommand(table, tools.place)}, or run doctor again with createTable=true on the URL`,
      })
      return false
    }
    await tools.send((sdk) => tools.ensureTable(sdk))
    findings.push({
      level: 'info',
      message: `Table "${table}" did not exist in region ${tools.place.region ?? '(unknown)'}: created it (on-demand capacity, as createTable=true asked)`,
    })
    return true
  }
}

/**
 * The engine's conditional-write probe (src/engines/cas/doctor.ts) on an item of its own, deleted after.
 * A refusal that brings no item is a store that ignores ALL_OLD: safe, but every refusal then costs a read.
 */
async function probe(adapter: CasAdapter, tools: DoctorTools, findings: DoctorFinding[]): Promise<void> {
  const key = probeKey()
  const { signal } = tools
  let bare = false
  const noted = (write: CasWrite) => {
    if (!write.ok && write.current === undefined) bare = true
    return write
  }
  const watched = {
    id: adapter.id,
    read: (k: string, s: AbortSignal, clock?: ServerClock) => adapter.read(k, s, clock),
    create: (k: string, body: string, s: AbortSignal) => adapter.create(k, body, s).then(noted),
    replace: (k: string, body: string, v: string, s: AbortSignal) =>
      adapter.replace(k, body, v, s).then(noted),
  }
  const conditions = { createCondition: 'attribute_not_exists(pk)', replaceCondition: 'version = :read' }
  try {
    findings.push(
      ...(await probeConditionalWrites(watched, { key, server: tools.server, ...conditions }, signal)),
    )
  } finally {
    await tools
      .send((sdk, client) =>
        client.send(new sdk.DeleteItemCommand({ TableName: tools.table, Key: itemKey(key) }), {
          abortSignal: signal,
        }),
      )
      .catch(() => {})
  }
  if (bare && findings.every((f) => f.level !== 'error')) {
    findings.push({
      level: 'warn',
      message: `${adapter.id} (server: ${tools.server}) returns no item with a refused write (ReturnValuesOnConditionCheckFailure: ALL_OLD): every refusal costs a read`,
    })
  }
}

export async function runDoctor(adapter: CasAdapter, tools: DoctorTools): Promise<DoctorFinding[]> {
  const findings: DoctorFinding[] = []
  try {
    if (await checkTable(tools, findings)) await probe(adapter, tools, findings)
  } catch (error) {
    if (tools.signal.aborted) throw tools.signal.reason
    findings.push({ level: 'error', message: `${adapter.id}: ${describeFailure(error).text}` })
  }
  return findings
}
