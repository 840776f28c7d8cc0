import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { startEtcd } from './etcd.js'
import { squat, takenFirst } from './squat.js'

describe('test servers: etcd', { timeout: 180_000 }, () => {
  it('starts a cluster on fresh ports when one member could not bind its peer port', async () => {
    const squatter = await squat()
    // Ports go client, peer for m0, then m1, m2: the taken one is m1's peer port.
    const pickPorts = takenFirst(squatter.port, 3)
    try {
      const cluster = await startEtcd(3, { pickPorts })
      try {
        assert.equal(pickPorts.picks, 2)
        const ports = cluster.members.flatMap((m) => [m.clientPort, m.peerPort])
        assert.ok(!ports.includes(squatter.port))
        assert.ok((await Promise.all(cluster.members.map((m) => m.healthy()))).every(Boolean))
        assert.ok(cluster.members.includes(await cluster.leader()))
      } finally {
        await cluster.destroy()
      }
    } finally {
      await squatter.close()
    }
  })

  it('restarts a member on its own ports, and says so with the log when one is taken', async () => {
    const cluster = await startEtcd(1)
    const [member] = cluster.members
    try {
      await member!.stop()
      const squatter = await squat(member!.clientPort)
      try {
        await assert.rejects(member!.restart(), (error: Error) => {
          assert.match(error.message, /etcd m0 .* could not start again on its old port/)
          assert.match(error.message, /server log \(tail\)[\s\S]*address already in use/)
          return true
        })
      } finally {
        await squatter.close()
      }
      await member!.restart()
      assert.equal(await member!.healthy(), true)
    } finally {
      await cluster.destroy()
    }
  })
})
