import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { squat, takenFirst } from './squat.js'
import { startZooKeeper } from './zookeeper.js'

describe('test servers: zookeeper', { timeout: 240_000 }, () => {
  it('starts an ensemble on fresh ports when one member could not bind its client port, and elects a new leader after a kill', async () => {
    const squatter = await squat()
    // Ports go client, quorum, election for member 1, then 2, 3: the taken one is member 2's client port.
    const pickPorts = takenFirst(squatter.port, 3)
    try {
      const ensemble = await startZooKeeper(3, { pickPorts })
      try {
        assert.equal(pickPorts.picks, 2)
        assert.ok(!ensemble.members.some((m) => m.clientPort === squatter.port))
        const modes = await Promise.all(ensemble.members.map((m) => m.mode()))
        assert.deepEqual(modes.filter((m) => m === 'leader').length, 1, `modes: ${modes}`)
        const leader = await ensemble.leader()
        leader.signal('SIGKILL')
        const next = await ensemble.leader()
        assert.notEqual(next, leader)
        await leader.restart()
        await ensemble.serving()
        assert.equal(await leader.mode(), 'follower')
      } finally {
        await ensemble.destroy()
      }
    } finally {
      await squatter.close()
    }
  })

  it('restarts a standalone server on its own port, and says so with the log when the port is taken', async () => {
    const server = await startZooKeeper(1)
    const [member] = server.members
    try {
      assert.equal(await member!.mode(), 'standalone')
      await member!.stop()
      const squatter = await squat(member!.clientPort)
      try {
        await assert.rejects(member!.restart(), (error: Error) => {
          assert.match(error.message, /zookeeper 1 .* could not start again on its old port/)
          assert.match(error.message, /server log \(tail\)[\s\S]*(Address already in use|BindException)/)
          return true
        })
      } finally {
        await squatter.close()
      }
      await member!.restart()
      assert.equal(await member!.mode(), 'standalone')
    } finally {
      await server.destroy()
    }
  })
})
