import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { freePorts, onFreshPorts, START_ATTEMPTS } from './ports.js'
import { ServerProcess } from './process.js'
import { squat, takenFirst } from './squat.js'

describe('test servers: ports and readiness', () => {
  it('hands out distinct free ports in one pick', async () => {
    const ports = await freePorts(20)
    assert.equal(new Set(ports).size, 20)
    for (const port of ports) await (await squat(port)).close()
  })

  it('tries a start again on fresh ports, and names every failed attempt when none works', async () => {
    const seen: number[][] = []
    const failing = onFreshPorts('a server that never starts', 2, async (ports) => {
      seen.push(ports)
      throw new Error(`no luck on ${ports.join(',')}`)
    })
    await assert.rejects(failing, (error: Error) => {
      assert.match(error.message, /a server that never starts did not start in 3 attempts/)
      for (const ports of seen) assert.ok(error.message.includes(`no luck on ${ports.join(',')}`))
      return true
    })
    assert.equal(seen.length, START_ATTEMPTS)
    assert.notDeepEqual(seen[0], seen[1], 'each attempt gets fresh ports')
  })

  it('moves past a port another process took: the next attempt binds elsewhere', async () => {
    const squatter = await squat()
    const pick = takenFirst(squatter.port)
    try {
      // A tiny server that binds its port or dies of EADDRINUSE, as redis-server and etcd do.
      const bound = await onFreshPorts(
        'a node listener',
        1,
        async ([port]) => {
          const script = `require('net').createServer().listen(${port}, '127.0.0.1', () => console.log('LISTENING'))`
          const proc = new ServerProcess(`node on ${port}`, process.execPath, ['-e', script], process.cwd())
          try {
            await proc.untilReady(async () => /^LISTENING$/m.test(proc.log()), 10_000)
            return { port: port!, proc }
          } catch (error) {
            await proc.stop()
            throw error
          }
        },
        pick,
      )
      assert.notEqual(bound.port, squatter.port)
      assert.equal(pick.picks, 2, 'the first attempt failed on the taken port')
      await bound.proc.stop()
    } finally {
      await squatter.close()
    }
  })

  it('fails at once when the server exits, with its output in the error', async () => {
    const proc = new ServerProcess(
      'a server that exits',
      'sh',
      ['-c', 'echo "bind: address in use" >&2; exit 3'],
      '.',
    )
    const started = performance.now()
    await assert.rejects(
      proc.untilReady(async () => false, 60_000),
      (error: Error) => {
        assert.match(error.message, /a server that exits exited \(code 3\)/)
        assert.match(error.message, /server log \(tail\)[\s\S]*bind: address in use/)
        return true
      },
    )
    assert.ok(performance.now() - started < 30_000, 'it did not wait for the readiness bound')
  })

  it('says so when a server never becomes ready, with its log tail', async () => {
    const proc = new ServerProcess('a silent server', 'sh', ['-c', 'echo starting; sleep 30'], '.')
    try {
      await assert.rejects(
        proc.untilReady(async () => false, 300),
        /timed out after 300 ms waiting for a silent server to become ready[\s\S]*starting/,
      )
    } finally {
      await proc.stop()
    }
  })

  it('names a binary that cannot be started', async () => {
    const proc = new ServerProcess('a missing binary', '/nonexistent/server', [], '.')
    await assert.rejects(
      proc.untilReady(async () => true, 5000),
      /a missing binary could not be started: .*ENOENT/,
    )
  })
})
