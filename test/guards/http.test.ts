/**
 * The HTTP fence guard, on a real Node `http` server and on a fetch-style handler, with locks from the
 * memory backend: a paused holder's request is refused with 412 once the next holder has written, and
 * the first guarded request goes through; 428 without a token, 400 for a malformed one, 503 when the
 * store fails; an admitted request whose write is slow still lands before a newer holder's.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { FENCING_TOKEN_HEADER, guardFetchHandler, guardHttpListener } from '../../src/guards/http.js'
import { createLockClient, type LockClient } from '../../src/index.js'
import { waitUntil } from '../support/wait.js'
import { pausedHolder } from './paused-holder.js'

const bodyOf = async (request: IncomingMessage) => {
  let text = ''
  for await (const chunk of request) text += chunk
  return text
}

describe('guards/http: Node http server', { timeout: 120_000 }, () => {
  let server: Server
  let base: string
  let locks: LockClient
  const resources = new Map<string, string>()
  /** A gate per body text: the handler waits on it before writing (a slow write). */
  const gates = new Map<string, Promise<void>>()
  let seen = 0
  /** The bodies whose handler has reached its write. */
  const writing = new Set<string>()
  before(async () => {
    locks = createLockClient('memory:guards-http', { ttl: 1000 })
    const listener = guardHttpListener(
      {
        resource: (req) => {
          seen++
          return req.method === 'GET' ? undefined : req.url
        },
      },
      async (req: IncomingMessage, res: ServerResponse) => {
        if (req.method === 'GET') return void res.end(resources.get(req.url!) ?? '')
        const body = await bodyOf(req)
        writing.add(body)
        await gates.get(body)
        resources.set(req.url!, body)
        res.end('written')
      },
    )
    server = createServer(listener)
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  after(async () => {
    await locks.close()
    server.closeAllConnections()
    server.close()
  })

  const put = (path: string, body: string, token?: string) =>
    fetch(`${base}${path}`, {
      method: 'PUT',
      body,
      headers: token === undefined ? {} : { [FENCING_TOKEN_HEADER]: token },
    })

  it("refuses a paused holder's request with 412 once the next holder has written; the first goes through", async () => {
    const { stale, next } = await pausedHolder(locks, 'report:7', async (a) => {
      assert.equal((await put('/report/7', 'first', `${a.fence}`)).status, 200, 'the first guarded write')
      assert.equal((await put('/report/7', 'first, again', `${a.fence}`)).status, 200, 'more than once')
    })
    assert.equal((await put('/report/7', 'second', `${next.fence}`)).status, 200)
    const refused = await put('/report/7', 'stale', `${stale.fence}`)
    assert.equal(refused.status, 412)
    assert.match(await refused.text(), /older than/)
    assert.equal(await (await fetch(`${base}/report/7`)).text(), 'second', 'GET is unguarded here')
    await next.release()
  })

  it('428 without a token, 400 for a malformed one; neither reaches the handler', async () => {
    const missing = await put('/other', 'x')
    assert.equal(missing.status, 428)
    assert.match(await missing.text(), /\/other takes writes only with a Fencing-Token header/)
    for (const token of ['abc', '-1', '1.5', '99999999999999999999', '9223372036854775808']) {
      const bad = await put('/other', 'x', token)
      assert.equal(bad.status, 400, `token ${token}`)
      await bad.text()
    }
    assert.equal(resources.has('/other'), false)
    assert.equal((await put('/other', 'x', '9223372036854775807')).status, 200, 'the largest fence')
  })

  it("an admitted request's slow write lands before the newer holder's request is admitted", async () => {
    let open!: () => void
    gates.set(
      'slow, older',
      new Promise<void>((resolve) => {
        open = resolve
      }),
    )
    const older = put('/slow', 'slow, older', '10')
    older.catch(() => {})
    await waitUntil(async () => writing.has('slow, older'), 'the older request writing', { withinMs: 30_000 })
    const before = seen
    const newer = put('/slow', 'newer', '11')
    newer.catch(() => {})
    // The newer request has reached the guard (it asked for its resource) and waits for the turn.
    await waitUntil(async () => seen > before, 'the newer request at the guard', { withinMs: 30_000 })
    assert.equal(resources.get('/slow'), undefined)
    open()
    assert.equal((await older).status, 200)
    assert.equal((await newer).status, 200)
    assert.equal(resources.get('/slow'), 'newer', "the newer holder's write is the last")
  })
})

describe('guards/http: as a Connect/Express middleware', () => {
  it('passes the extra arguments (next) through, and refuses without calling them', async () => {
    const calls: string[] = []
    const middleware = guardHttpListener(
      { resource: () => 'r' },
      (_req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => {
        next()
        res.end()
      },
    )
    const server = createServer(
      (req, res) => void middleware(req, res, () => calls.push(`next ${req.headers['fencing-token']}`)),
    )
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
      const send = (token: string) => fetch(url, { method: 'POST', headers: { 'Fencing-Token': token } })
      assert.equal((await send('2')).status, 200)
      assert.equal((await send('1')).status, 412)
      assert.deepEqual(calls, ['next 2'])
    } finally {
      server.closeAllConnections()
      server.close()
    }
  })
})

describe('guards/http: fetch-style handler', { timeout: 120_000 }, () => {
  let locks: LockClient
  before(() => {
    locks = createLockClient('memory:guards-fetch', { ttl: 1000 })
  })
  after(() => locks.close())

  it("refuses a paused holder's request with 412 once the next holder has written; the first goes through", async () => {
    let body = ''
    const handler = guardFetchHandler({ resource: (r) => new URL(r.url).pathname }, async (r) => {
      body = await r.text()
      return new Response('written')
    })
    const put = (text: string, fence: bigint) =>
      handler(
        new Request('http://app/doc/1', {
          method: 'PUT',
          body: text,
          headers: { 'fencing-token': `${fence}` },
        }),
      )
    const { stale, next } = await pausedHolder(locks, 'doc:1', async (a) => {
      assert.equal((await put('first', a.fence)).status, 200)
    })
    assert.equal((await put('second', next.fence)).status, 200)
    assert.equal((await put('stale', stale.fence)).status, 412)
    assert.equal(body, 'second')
    await next.release()
  })

  it('a failing store answers 503 and the handler does not run; a custom header name', async () => {
    let ran = false
    const handler = guardFetchHandler(
      {
        resource: () => 'r',
        header: 'X-Lock-Fence',
        store: {
          advance: () => {
            throw new Error('store down')
          },
        },
      },
      () => {
        ran = true
        return new Response('ok')
      },
    )
    const answer = await handler(
      new Request('http://app/', { method: 'POST', headers: { 'x-lock-fence': '3' } }),
    )
    assert.equal(answer.status, 503)
    assert.match(await answer.text(), /fence store of r failed \(store down\)/)
    assert.equal(ran, false)
    assert.throws(() => guardFetchHandler({} as never, () => new Response()), /`resource` to be a function/)
  })
})
