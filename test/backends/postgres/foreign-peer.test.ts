/**
 * A postgres:// URL that reaches a peer which is not PostgreSQL but sends bytes postgres.js reads as
 * protocol messages. postgres.js settles a query on ReadyForQuery ('Z') whatever came before it, and needs
 * no authentication message first: a peer that answers each message with a bare 'Z' "completes" every
 * query with no rows and no command tag. Read as "no row", an acquire would be a refusal (the lock held by
 * another owner); no statement ran, so it is an unavailable store.
 */
import assert from 'node:assert/strict'
import { createServer, type Socket } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { BackendUnavailableError, createLockClient, type LockClient } from '../../../src/index.js'
import { awaitLater } from '../../support/later.js'

/** ReadyForQuery, transaction status idle: the whole message. */
const READY = Buffer.from([0x5a, 0, 0, 0, 5, 0x49])

describe('postgres: a peer that only says ReadyForQuery', { timeout: 60_000 }, () => {
  const sockets = new Set<Socket>()
  const answerReady = (socket: Socket) => {
    sockets.add(socket)
    socket.on('error', () => {})
    // One 'Z' per chunk the client writes: the startup message, then each query.
    socket.on('data', () => socket.write(READY))
  }
  const server = createServer(answerReady)
  let url = ''
  const open: LockClient[] = []

  before(async () => {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', resolve)
    })
    const address = server.address()
    url = `postgres://postgres@127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/postgres`
  })

  after(async () => {
    await Promise.all(open.map((c) => c.close()))
    for (const socket of sockets) socket.destroy()
    server.close()
  })

  it('tryAcquire fails as unavailable, never as held by another owner', async () => {
    const client = createLockClient(url, { ttl: '10s' })
    open.push(client)
    const attempt = awaitLater(client.tryAcquire('k'))
    await assert.rejects(attempt, (error: Error) => {
      assert.ok(error instanceof BackendUnavailableError, `${error.name}: ${error.message}`)
      assert.match(error.message, /no command tag/)
      return true
    })
  })

  it('acquire with a timeout fails as unavailable too', async () => {
    const client = createLockClient(url, { ttl: '10s' })
    open.push(client)
    const acquire = awaitLater(client.acquire('k', { timeout: '1s' }))
    await assert.rejects(acquire, (error: Error) => {
      assert.ok(error instanceof BackendUnavailableError, `${error.name}: ${error.message}`)
      return true
    })
  })
})
