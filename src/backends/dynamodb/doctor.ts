/**
 * `fencelock doctor` on DynamoDB: the table exists with fencelock's key, and the server enforces the
 * conditions every grant relies on, proved on a probe item of its own (a DynamoDB look-alike that ignored
 * condition expressions would let two holders in at once).
 */
import { randomUUID } from 'node:crypto'
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb'
import type { DoctorFinding } from '../../core/backend.js'
import type { CasDriver } from '../../engines/cas-lease-driver.js'
import { describeFailure, isTableMissing } from './faults.js'
import { createTableCommand, itemKey } from './layout.js'
import { type DynamoDbSdk, schemaProblem } from './table.js'

export interface DoctorTools {
  readonly table: string
  readonly createTable: boolean
  readonly signal: AbortSignal
  /** Runs one SDK call with the driver's client and SDK module. */
  send<T>(make: (sdk: DynamoDbSdk, client: DynamoDBClient, signal: AbortSignal) => Promise<T>): Promise<T>
  /** Creates the table if missing (the driver's own, shared with its first use). */
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
        message: `Table "${table}": ${problem} (${createTableCommand(table)})`,
      })
      return false
    }
    const billing = Table?.BillingModeSummary?.BillingMode ?? 'PROVISIONED'
    findings.push({
      level: 'ok',
      message: `Table "${table}": key "pk" (string), ${billing}, ${Table?.TableStatus}`,
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
        message: `Table "${table}" does not exist; create it with: ${createTableCommand(table)}`,
      })
      return false
    }
    await tools.send((sdk) => tools.ensureTable(sdk))
    findings.push({
      level: 'info',
      message: `Table "${table}" did not exist: created it (on-demand capacity)`,
    })
    return true
  }
}

/**
 * Two creates of one new item (the second must be refused), a replace at the current version (must be
 * written) and one at the stale version (must be refused); then the probe item is deleted.
 */
async function probe(driver: CasDriver, tools: DoctorTools, findings: DoctorFinding[]): Promise<void> {
  const key = `fencelock-doctor/${randomUUID()}`
  const { signal } = tools
  const first = await driver.create(key, 'doctor probe 1', signal)
  if (!first.ok) throw new Error(`a create of the new probe item ${key} was refused`)
  const second = await driver.create(key, 'doctor probe 2', signal)
  const current = await driver.replace(key, 'doctor probe 3', first.version, signal)
  const stale = await driver.replace(key, 'doctor probe 4', first.version, signal)
  const enforced = !second.ok && current.ok && !stale.ok
  if (!enforced) {
    findings.push({
      level: 'error',
      message:
        `${driver.id} does not enforce condition expressions (second create ${second.ok ? 'written' : 'refused'}, ` +
        `replace at the current version ${current.ok ? 'written' : 'refused'}, at a stale one ` +
        `${stale.ok ? 'written' : 'refused'}): two holders could take one lock there`,
    })
  } else {
    findings.push({
      level: 'ok',
      message: 'Conditional writes enforced: a second create and a stale replace were refused',
    })
    if (!second.ok && second.current === undefined) {
      findings.push({
        level: 'warn',
        message: `${driver.id} returns no item with a refused write (ReturnValuesOnConditionCheckFailure): every refusal costs a read`,
      })
    }
  }
  await tools
    .send((sdk, client) =>
      client.send(new sdk.DeleteItemCommand({ TableName: tools.table, Key: itemKey(key) }), {
        abortSignal: signal,
      }),
    )
    .catch((error: unknown) =>
      findings.push({
        level: 'warn',
        message: `Could not delete the probe item ${key}: ${describeFailure(error).text}`,
      }),
    )
}

export async function runDoctor(driver: CasDriver, tools: DoctorTools): Promise<DoctorFinding[]> {
  const findings: DoctorFinding[] = []
  try {
    if (await checkTable(tools, findings)) await probe(driver, tools, findings)
  } catch (error) {
    if (tools.signal.aborted) throw tools.signal.reason
    findings.push({ level: 'error', message: `${driver.id}: ${describeFailure(error).text}` })
  }
  return findings
}
