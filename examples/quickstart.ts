import { createLockClient } from 'fencelock'

const locks = createLockClient('file:///tmp/fencelock-example', { ttl: '15s' })

{
  // Waits up to 10 s, renews the lease while held, releases at the end of the block.
  await using lock = await locks.acquire('reports:nightly', { timeout: '10s' })
  console.log(`holding ${lock.key} with fence ${lock.fence}`)
  // Hand lock.fence to what you write (docs/fence-guards.md) so it rejects a stale holder,
  // and lock.signal to work that must stop if the lease is lost.
}

const maybe = await locks.tryAcquire('jobs:42') // null when held elsewhere
console.log(maybe ? 'got jobs:42' : 'jobs:42 is busy')
await maybe?.release()

const summary = await locks.withLock('jobs:42', async (lock) => `ran under fence ${lock.fence}`)
console.log(summary)
console.log(await locks.inspect('jobs:42')) // { held: false, fence: … }: diagnostic only
await locks.close()
