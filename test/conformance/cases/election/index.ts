/**
 * Leader election, on every backend that offers it: one leader at a time, terms that only increase, the
 * leader's value (proclaimed, and refused once leadership is gone), a vacancy seen by observers, and a
 * campaign given up leaves no candidate behind to lead later. All through the public API.
 */
import assert from 'node:assert/strict'
import { type LeaderView, LockLostError, LockNotAcquiredError } from '../../../../src/index.js'
import { awaitLater } from '../../../support/later.js'
import { sleep } from '../../../support/time.js'
import { pollUntil } from '../../../support/wait.js'
import type { ConformanceCase } from '../../harness.js'

/** The generous bound of every wait: a liveness limit on a loaded machine, not a speed claim. */
const WITHIN = { withinMs: 30_000, everyMs: 20 }

export const electionCases: ConformanceCase[] = [
  {
    name: 'election: one leader at a time; the next one leads after a resign, with a greater term',
    async run(ctx) {
      const name = ctx.key('elect-one')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const first = await a.election(name).campaign({ value: 'http://a.example:8080' })
      const view = await b.election(name).leader()
      assert.ok(view.leader, 'the campaign that resolved leads')
      assert.equal(view.owner, first.owner)
      assert.equal(view.value, 'http://a.example:8080')
      // As another client reads it back (the kit's `grantOfFence`: Redlock's leaves out the node index).
      const grant = (term: bigint | undefined) =>
        term === undefined || !ctx.kit.grantOfFence ? term : ctx.kit.grantOfFence(term)
      assert.equal(grant(view.term), grant(first.term))
      assert.equal(view.isMe, false)
      const mine = await a.election(name).leader()
      assert.ok(mine.leader && mine.isMe, "the leader's own client sees isMe")
      await assert.rejects(b.election(name).campaign({ timeout: 0 }), LockNotAcquiredError)
      const waiting = awaitLater(b.election(name).campaign({ value: 'b' }))
      await sleep(ctx.ttl(1))
      await first.resign()
      const second = await waiting
      assert.ok(second.term > first.term, `term ${second.term} after ${first.term}`)
      const now = await a.election(name).leader()
      assert.ok(now.leader && now.owner === second.owner && now.value === 'b')
      await second.resign()
      assert.equal((await a.election(name).leader()).leader, false)
    },
  },

  {
    name: 'election: terms keep increasing over many leaderships',
    async run(ctx) {
      const name = ctx.key('elect-terms')
      const client = ctx.client({ ttl: '20s' })
      let last = 0n
      for (let i = 0; i < 5; i++) {
        const lead = await client.election(name).campaign({ value: `round ${i}` })
        assert.ok(lead.term > last, `term ${lead.term} after ${last}`)
        last = lead.term
        await lead.resign()
      }
    },
  },

  {
    name: 'election: proclaim publishes a new value; a leader replaced after its lease can no longer proclaim',
    async run(ctx) {
      const name = ctx.key('elect-proclaim')
      const lease = ctx.ttl(3)
      const [a, b] = [ctx.client({ ttl: lease, renew: false }), ctx.client({ ttl: '20s' })]
      const old = await a.election(name).campaign({ value: 'v1 é 🗳' })
      await old.proclaim('v2 http://[::1]:8080/é')
      const seen = await b.election(name).leader()
      assert.ok(
        seen.leader && seen.value === 'v2 http://[::1]:8080/é',
        JSON.stringify(seen, (_, v) => String(v)),
      )
      // The old leader stops renewing: once its lease ends, another candidate leads with a greater term.
      const next = await b.election(name).campaign({ value: 'next', timeout: '60s' })
      assert.ok(next.term > old.term)
      await assert.rejects(old.proclaim('too late'), LockLostError)
      assert.ok(old.signal.aborted)
      const view = await b.election(name).leader()
      assert.ok(view.leader && view.value === 'next' && view.owner === next.owner)
      await next.resign()
    },
  },

  {
    name: 'election: observe reports the leader, a new value, the vacancy and the next leader',
    async run(ctx) {
      const name = ctx.key('elect-observe')
      const [leaders, watcher] = [ctx.client({ ttl: '20s' }), ctx.client()]
      const stop = new AbortController()
      const lead = await leaders.election(name).campaign({ value: 'a' })
      const views = watcher.election(name).observe({ signal: stop.signal })[Symbol.asyncIterator]()
      const shown = (v: LeaderView) => (v.leader ? `leader ${v.value}` : 'vacant')
      // Each step waits for the observer to report it before the next: no step can hide another.
      const next = async (): Promise<LeaderView> => {
        const timer = new AbortController()
        const got = await Promise.race([
          views.next(),
          sleep(WITHIN.withinMs, timer.signal).then(() => undefined),
        ]).finally(() => timer.abort())
        assert.ok(got && !got.done, 'the observer reported nothing within 30 s')
        return got.value
      }
      const first = await next()
      assert.equal(shown(first), 'leader a')
      await lead.proclaim('b')
      assert.equal(shown(await next()), 'leader b')
      await lead.resign()
      const vacant = await next()
      assert.equal(shown(vacant), 'vacant')
      const successor = await leaders.election(name).campaign({ value: 'c' })
      const last = await next()
      assert.equal(shown(last), 'leader c')
      assert.ok(
        last.leader && last.term !== undefined && last.term > lead.term,
        'a new leader has a greater term',
      )
      stop.abort()
      await views.return?.()
      await successor.resign()
    },
  },

  {
    name: 'election: a campaign given up leaves no candidate that could lead later',
    async run(ctx) {
      const name = ctx.key('elect-abandon')
      const [a, b] = [ctx.client({ ttl: '20s' }), ctx.client({ ttl: '20s' })]
      const first = await a.election(name).campaign({ value: 'a' })
      await assert.rejects(
        b.election(name).campaign({ value: 'ghost', timeout: ctx.ttl(2) }),
        LockNotAcquiredError,
      )
      const stop = new AbortController()
      const aborted = awaitLater(b.election(name).campaign({ value: 'ghost', signal: stop.signal }))
      await sleep(ctx.ttl(1))
      stop.abort(new Error('the candidate gave up'))
      await assert.rejects(aborted, /the candidate gave up/)
      await first.resign()
      // Nobody campaigns any more: the election stays vacant (a leftover queue entry would lead).
      await sleep(ctx.ttl(2))
      const view = await pollUntil(
        () => a.election(name).leader(),
        (v) => !v.leader,
        WITHIN,
      )
      assert.equal(
        view.leader,
        false,
        `a given-up campaign leads: ${JSON.stringify(view, (_, v) => String(v))}`,
      )
    },
  },
]
