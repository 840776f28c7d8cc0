/**
 * The chaos scenarios (../shared/research/reliability-anchors.md, Part C.4). Each names the faults its
 * nemesis injects and, per store, the violations that store is known to show there (reported as
 * expected, with the reason; never hidden). Times scale with the ttl, so a short CI run and a longer
 * full run exercise the same physics.
 */
import type { NemesisContext, Scenario } from './harness.js'
import type { Target } from './targets.js'

const TTL = 1000
const HOLD: readonly [number, number] = [5, 40]

/** What most scenarios share: four workers on a fenced resource, ttl 1 s, short holds. */
const FENCED = { mode: 'fenced', workers: 4, ttlMs: TTL, holdMs: HOLD } as const

/**
 * A read-write lock's scenarios: four workers, each acquire a reader or a writer at random, on a fenced
 * resource that only writers write (readers share their epoch's fence).
 */
const RWLOCK = { ...FENCED, primitive: 'rwlock' } as const

/**
 * A semaphore's scenarios: four workers taking one permit each of a limit of 2, on an unfenced resource (a
 * permit's sequence is no fence: two holders write at once by design).
 */
const SEMAPHORE = {
  mode: 'unfenced',
  workers: 4,
  ttlMs: TTL,
  holdMs: HOLD,
  primitive: 'semaphore',
  limit: 2,
} as const

/** A slots semaphore's scenarios: four workers taking one slot each of a limit of 2, fenced per slot. */
const SLOTS = { ...FENCED, primitive: 'slots', limit: 2 } as const

/** Repeats `fault` every `everyMs` (first after a random part of it) until the run ends. */
async function every(ctx: NemesisContext, everyMs: number, fault: () => Promise<void>): Promise<void> {
  await ctx.sleep(everyMs * (0.5 + ctx.rng() / 2))
  while (!ctx.signal.aborted) {
    await fault()
    await ctx.sleep(everyMs)
  }
}

/** Waits (bounded) for someone to hold the lock. */
async function holderOf(ctx: NemesisContext) {
  for (let i = 0; i < 100 && !ctx.signal.aborted; i++) {
    const holder = ctx.holder()
    if (holder) return holder
    await ctx.sleep(20)
  }
  return undefined
}

/** SIGKILLs the current holder; a new worker takes its place. */
async function killHolder(ctx: NemesisContext): Promise<void> {
  const worker = await holderOf(ctx)
  if (worker) await ctx.fault('kill-holder', worker.id, () => ctx.replace(worker))
}

/** SIGSTOPs the current holder for `ms`, then SIGCONTs it. */
async function pauseHolder(ctx: NemesisContext, ms: number, type = 'pause-holder'): Promise<void> {
  const worker = await holderOf(ctx)
  if (!worker) return
  await ctx.fault(type, worker.id, async () => {
    worker.paused = true
    worker.child.kill('SIGSTOP')
    await ctx.sleep(ms)
    worker.child.kill('SIGCONT')
    worker.paused = false
  })
}

/** Every 4 x ttl, cuts the holder off from the store (blackhole) for 2 x ttl, then resets its links. */
const cutOffHolder = (ctx: NemesisContext) =>
  every(ctx, 4 * TTL, async () => {
    const worker = await holderOf(ctx)
    if (!worker) return
    await ctx.fault('partition', worker.id, async () => {
      for (const p of worker.proxies) p.mode = 'blackhole'
      await ctx.sleep(2 * TTL)
      // Connections that lost bytes are reset, as a real partition's would time out.
      for (const p of worker.proxies) {
        p.mode = 'pass'
        p.cut()
      }
    })
  })

const networked: Scenario['applies'] = (t) => t.networked

/**
 * The file backend's leases are deadlines on the host's CLOCK_MONOTONIC, which every process of a host
 * shares: a process whose monotonic clock is faked (libfaketime) is outside that model. It judges the
 * others' leases by its own clock, so one running fast takes over live locks (and its late releases and
 * renewals meet their successors), one running slow keeps expired ones. Real processes cannot do this.
 */
const FILE_CLOCK = {
  A1: "file: a process with a faked monotonic clock judges other processes' deadlines wrongly",
  A2: 'file: … and its takeovers reorder fences against real time',
  A4: "file: … and its release or renewal lands on its successor's generation",
} as const

/**
 * The cas-lease stores (S3, GCS, DynamoDB) end a lease by observed expiry: a waiter takes over once it has
 * seen the record's version unchanged for the lease plus a margin (5 %) on its own monotonic clock, which
 * assumes every client's clock RATE is within that margin. A 2x or 0.5x clock is far outside it. On S3
 * and DynamoDB it still shows nothing here: renewals every ttl/3 change the version well inside even a
 * halved observation. GCS takes one write per second per object, so its renewals (and a release right after
 * a grant) are a second apart, at its shortest ttl (3 s, which its workers use here) a third of the lease:
 * a fast waiter's observation, (lease + margin) / 2 real ms, leaves only about half a second for a live
 * holder's delayed or paced write, and a slow holder's paced writes (a second of ITS clock: two real) come
 * after the others' takeover.
 */
const GCS_CLOCK = {
  fast: 'gcs: a 2x waiter takes over after (lease + margin) / 2 real ms, about half a second after a live holder’s next write is due (its writes are a second apart)',
  slow: 'gcs: a 0.5x holder paces its writes a second of its own clock (2 s real) apart, past the others’ observation of its lease',
} as const

const fastClock = (t: Target) => ({
  ...(t.name.startsWith('file') ? FILE_CLOCK : {}),
  ...(t.name === 'gcs' ? { A1: GCS_CLOCK.fast } : {}),
})

const slowClock = (t: Target) => ({
  A1:
    t.name === 'gcs'
      ? GCS_CLOCK.slow
      : 'a client clock at half speed is far beyond driftFactor: it believes in its lease past its end',
  ...(t.name.startsWith('file') ? FILE_CLOCK : {}),
})

/** The multi-key scenarios, taken one by one (K…) and, where the store offers it, atomically (KA…). */
const MULTI_KEY: Scenario[] = [
  {
    id: 'K1',
    title: 'multi-key: overlapping key sets in random orders, no faults',
    ...FENCED,
    primitive: 'multikey',
    applies: (t) => t.primitives.has('multikey'),
  },
  {
    id: 'K2',
    title: 'multi-key: overlapping key sets in random orders, a holder paused 2.5 x ttl every 3 x ttl',
    ...FENCED,
    primitive: 'multikey',
    applies: (t) => t.primitives.has('multikey'),
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'K15',
    title: 'multi-key: half of all acquires given up at a random await point',
    ...FENCED,
    primitive: 'multikey',
    ttlMs: 4 * TTL,
    abortAcquiresWithinMs: 20,
    applies: (t) => t.primitives.has('multikey'),
  },
]

export const scenarios: Scenario[] = [
  {
    id: 'S1',
    title: 'baseline contention, no faults',
    ...FENCED,
    applies: () => true,
  },
  {
    id: 'S2',
    title: 'holder paused 2.5 x ttl every 3 x ttl (fenced resource)',
    ...FENCED,
    applies: () => true,
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'S2u',
    title: 'holder paused 2.5 x ttl every 3 x ttl (unfenced resource: the damage fencing prevents)',
    mode: 'unfenced',
    workers: 4,
    ttlMs: TTL,
    holdMs: HOLD,
    applies: () => true,
    // A lease cannot stop a paused holder: its late write lands after the next holder's (a lost update).
    expected: () => ({ A3: 'unfenced resource: a holder paused past its lease overwrites the next holder' }),
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'S3',
    title: 'holder paused 0.4 x ttl every 2 x ttl (renewal catches up)',
    ...FENCED,
    applies: () => true,
    nemesis: (ctx) => every(ctx, 2 * TTL, () => pauseHolder(ctx, 0.4 * TTL)),
  },
  {
    id: 'S4',
    title: 'holder cut off from the store (blackhole) for 2 x ttl every 4 x ttl',
    ...FENCED,
    applies: networked,
    nemesis: cutOffHolder,
  },
  {
    id: 'S5',
    title: 'store crashes (SIGKILL) and restarts every 3 x ttl',
    ...FENCED,
    applies: (t) => t.features.has('crash'),
    expected: (t) =>
      t.features.has('durable')
        ? {}
        : {
            // Its fences do not start over: the server's clock is their floor.
            A1: 'Redis without persistence forgets held locks on restart',
          },
    nemesis: (ctx) =>
      every(ctx, 3 * TTL, () => ctx.fault('server-restart', 'store', () => ctx.store.crash!())),
  },
  {
    id: 'S6',
    title: 'Redlock nodes crash and restart empty one after another (C, B, A, C, …) while locks are held',
    ...FENCED,
    applies: (t) => t.features.has('redlock'),
    // Issue 11: each node restarted empty forgets its fence counters, and successive restarts of different
    // nodes once left a majority that had never seen the highest fence. Each restart comes once the
    // previous node is back in service: up for the restart delay (the default restartDelay, the largest
    // ttl) and caught up by the connected clients (admitted). Sooner, two nodes would have lost their
    // memory together, which no Redlock can recover from on its own (it stays unavailable, by design).
    nemesis: async (ctx) => {
      const { Redis } = await import('ioredis')
      const ports = ctx.store.ports
      /** Admitted: the node's marker is its run_id (the backend's default prefix). */
      const admitted = async (port: number) => {
        const admin = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 0, lazyConnect: true })
        admin.on('error', () => {})
        try {
          await admin.connect()
          const runId = /run_id:(\w+)/.exec(await admin.info('server'))?.[1]
          return runId !== undefined && (await admin.get('fencelock:!admitted')) === runId
        } catch {
          return false
        } finally {
          admin.disconnect()
        }
      }
      await ctx.sleep(TTL * (0.5 + ctx.rng() / 2))
      for (let i = 0; !ctx.signal.aborted; i++) {
        const node = ports.length - 1 - (i % ports.length)
        await ctx.fault('node-restart', `node ${node}`, async () => {
          await ctx.store.crash!(node)
          await ctx.sleep(TTL)
          // Bounded: a node never caught up is the run's failure to recover (A7), not a hang here.
          for (let t = 0; t < 200 && !ctx.signal.aborted && !(await admitted(ports[node]!)); t++) {
            await ctx.sleep(50)
          }
        })
        await ctx.sleep(TTL * ctx.rng())
      }
    },
  },
  {
    id: 'S7',
    title: 'holder killed (SIGKILL) every 2 x ttl; a new worker takes its place',
    ...FENCED,
    applies: () => true,
    nemesis: (ctx) => every(ctx, 2 * TTL, () => killHolder(ctx)),
  },
  {
    id: 'S8',
    title: 'the leader killed and restarted every 4 x ttl (3 members: etcd, ZooKeeper)',
    ...FENCED,
    applies: (t) => t.features.has('leader'),
    nemesis: (ctx) =>
      every(ctx, 4 * TTL, () => ctx.fault('leader-kill', 'leader', () => ctx.store.killLeader!())),
  },
  {
    id: 'S9',
    title: 'a waiter paused 2 x ttl while it waits (its lease/session dies meanwhile)',
    ...FENCED,
    applies: () => true,
    nemesis: (ctx) =>
      every(ctx, 3 * TTL, async () => {
        const worker = ctx.waiter()
        if (!worker) return
        await ctx.fault('pause-waiter', worker.id, async () => {
          worker.paused = true
          worker.child.kill('SIGSTOP')
          await ctx.sleep(2 * TTL)
          worker.child.kill('SIGCONT')
          worker.paused = false
        })
      }),
  },
  {
    id: 'S10w',
    title: "one client's wall clock 2 h ahead (its monotonic clock untouched)",
    ...FENCED,
    applies: () => true,
    // fencelock times leases on the monotonic clock only: a wall-clock step changes nothing.
    fakeClock: {
      workers: 1,
      label: 'wall +2h',
      rate: 1,
      env: { FAKETIME: '+2h', FAKETIME_DONT_FAKE_MONOTONIC: '1' },
    },
  },
  {
    id: 'S10f',
    title: "one client's clocks (monotonic too) run 2x fast",
    ...FENCED,
    applies: () => true,
    // A fast clock ends its leases early in its own eyes: safe, at some cost in renewals. As a waiter it
    // judges others' leases short: outside the file and cas-lease models (FILE_CLOCK, GCS_CLOCK).
    expected: fastClock,
    fakeClock: { workers: 1, label: 'x2 speed', rate: 2, env: { FAKETIME: '+0 x2' } },
  },
  {
    id: 'S10s',
    title: "one client's clocks (monotonic too) run at half speed",
    ...FENCED,
    applies: () => true,
    // Outside the model: driftFactor (1 %) bounds the clock-rate difference a lease tolerates. A client
    // whose clock runs at half speed believes in its lease for twice as long as the store keeps it.
    expected: slowClock,
    fakeClock: { workers: 1, label: 'x0.5 speed', rate: 0.5, env: { FAKETIME: '+0 x0.5' } },
  },
  // The same clock faults with holds of several renewals, so the faked worker renews as a holder (S10f/S10s
  // holds are shorter than one renewal interval) and waits on holders that renew.
  {
    id: 'S10fh',
    title:
      "one client's clocks run 2x fast; holds of 0.3-2 x ttl (it renews as a holder, waits on renewing ones)",
    ...FENCED,
    holdMs: [0.3 * TTL, 2 * TTL],
    applies: () => true,
    // A cas-lease waiter at 2x sees an unchanged version for (lease + margin) / 2 real ms before a takeover;
    // a holder renewing every ttl/3 changes it sooner, except on GCS (GCS_CLOCK).
    expected: fastClock,
    fakeClock: { workers: 1, label: 'x2 speed', rate: 2, env: { FAKETIME: '+0 x2' } },
  },
  {
    id: 'S10sh',
    title: "one client's clocks run at half speed; holds of 0.3-2 x ttl (it renews as a holder)",
    ...FENCED,
    holdMs: [0.3 * TTL, 2 * TTL],
    applies: () => true,
    expected: slowClock,
    fakeClock: { workers: 1, label: 'x0.5 speed', rate: 0.5, env: { FAKETIME: '+0 x0.5' } },
  },
  {
    id: 'S11',
    title: "the holder's lease removed on the server behind its back (premature expiry) every 2 x ttl",
    mode: 'fenced',
    workers: 4,
    ttlMs: TTL,
    holdMs: [20, 80],
    applies: (t) => t.features.has('expire'),
    // No lock survives its store forgetting it; the fence is what keeps the resource safe (A3 holds).
    expected: () => ({ A1: 'the store itself ended the lease early: a second grant inside the first one' }),
    nemesis: (ctx) =>
      every(ctx, 2 * TTL, async () => {
        if (await holderOf(ctx))
          await ctx.fault('expire-early', 'store', () => ctx.store.expireEarly!(ctx.key))
      }),
  },
  {
    id: 'S12',
    title: 'every client 15 ms slower each way (latency) for 2 x ttl every 3 x ttl',
    ...FENCED,
    applies: networked,
    nemesis: (ctx) =>
      every(ctx, 3 * TTL, () =>
        ctx.fault('latency', 'all clients', async () => {
          for (const w of ctx.workers) for (const p of w.proxies) p.delayMs = 15
          await ctx.sleep(2 * TTL)
          for (const w of ctx.workers) for (const p of w.proxies) p.delayMs = 0
        }),
      ),
  },
  {
    id: 'S13',
    title: 'replies lost: a waiting client hears nothing back for 300 ms, then its connections reset',
    ...FENCED,
    applies: networked,
    nemesis: (ctx) =>
      every(ctx, 1.5 * TTL, async () => {
        const worker = ctx.waiter() ?? ctx.holder()
        if (!worker) return
        await ctx.fault('lost-reply', worker.id, async () => {
          for (const p of worker.proxies) p.mode = 'drop-replies'
          await ctx.sleep(300)
          for (const p of worker.proxies) {
            p.mode = 'pass'
            p.cut()
          }
        })
      }),
  },
  {
    id: 'S14',
    title: 'holder paused just past its ttl (1.2 x): its release and renewal come after the next grant',
    ...FENCED,
    applies: () => true,
    nemesis: (ctx) => every(ctx, 2.5 * TTL, () => pauseHolder(ctx, 1.2 * TTL, 'pause-holder')),
  },
  {
    id: 'S15',
    title: 'half of all acquires aborted at a random await point (attempt in flight, waiting, hand-over)',
    ...FENCED,
    // Long enough that a grant left behind by an aborted acquire shows as the lock lying idle while
    // others wait (the checker's idle rule is on for this scenario: ttl / 2).
    ttlMs: 4 * TTL,
    abortAcquiresWithinMs: 20,
    applies: () => true,
  },
  {
    id: 'S16',
    title:
      'store-side faults every ttl: 1-2 writes committed with their replies lost, or a burst of 5-20 503s',
    ...FENCED,
    applies: (t) => t.features.has('store-faults'),
    // A lost reply leaves the client not knowing whether its write landed (the engine reads the record back,
    // its nonce says); a 503 commits nothing (the SDK retries, the engine's attempt fails or tries again).
    nemesis: (ctx) => {
      const faults = ctx.store.storeFaults!
      return every(ctx, TTL, async () => {
        const lose = ctx.rng() < 0.5
        const count = lose ? 1 + Math.floor(ctx.rng() * 2) : 5 + Math.floor(ctx.rng() * 16)
        await ctx.fault(lose ? 'lost-after-commit' : '503-burst', `store x${count}`, async () => {
          if (lose) faults.loseWriteReplies(count)
          else faults.unavailable(count)
          await ctx.sleep(TTL / 2)
          faults.clear()
        })
      })
    },
  },
  {
    id: 'S17',
    title: "an operator deletes lock state (the key's, or every key's) every 4 s",
    ...FENCED,
    applies: (t) => t.features.has('delete-state'),
    // A holder whose state is deleted may be joined by a second one: the store forgot it (as S11). What
    // must hold: fences keep rising (A2, A3), and nobody waits on a free lock (the idle rule). Five
    // ttls: a deleted S3, GCS or DynamoDB record made again is granted only once the store's clock has
    // ticked twice (up to 2 s, plus four round trips: src/engines/cas/fence.ts), and the lock lies idle
    // meanwhile; a record deleted at any age never repeats a fence. For the same reason the first grant
    // after the last delete may come up to those 2 s later than the store's own recovery time.
    idleBoundTtls: 5,
    extraRecoveryMs: 2000,
    expected: () => ({ A1: 'the operator deleted the holder’s lease: a second grant inside the first one' }),
    nemesis: (ctx) =>
      every(ctx, Math.max(2 * TTL, 4000), async () => {
        const all = ctx.rng() < 0.3
        await ctx.fault(all ? 'delete-all-state' : 'delete-state', 'store', () =>
          ctx.store.deleteState!(all ? undefined : ctx.key),
        )
      }),
  },
  {
    id: 'S18',
    title: 'one member cut off from the others (clients’ links up) for 3 x ttl every 4 x ttl',
    ...FENCED,
    applies: (t) => t.features.has('members'),
    nemesis: (ctx) =>
      every(ctx, 4 * TTL, async () => {
        const node = Math.floor(ctx.rng() * ctx.store.ports.length)
        await ctx.fault('member-partition', `member ${node}`, async () => {
          const heal = await ctx.store.isolateMember!(node)
          try {
            await ctx.sleep(3 * TTL)
          } finally {
            await heal()
          }
        })
      }),
  },
  {
    id: 'S19',
    title: 'the holder hears no replies for 0.6 x ttl (its renewals and release), then its links reset',
    ...FENCED,
    // Holds of several renewals, so a renewal (and often the release) falls inside the silence.
    holdMs: [0.3 * TTL, 1.5 * TTL],
    applies: networked,
    nemesis: (ctx) =>
      every(ctx, 2 * TTL, async () => {
        const worker = await holderOf(ctx)
        if (!worker) return
        await ctx.fault('lost-reply-holder', worker.id, async () => {
          for (const p of worker.proxies) p.mode = 'drop-replies'
          await ctx.sleep(0.6 * TTL)
          for (const p of worker.proxies) {
            p.mode = 'pass'
            p.cut()
          }
        })
      }),
  },
  {
    id: 'S20',
    title: 'the host reboots quickly (every process killed, a new boot), then a cleaner empties the root',
    ...FENCED,
    applies: (t) => t.features.has('reboot'),
    // The first new fence range of a boot waits until the wall clock has passed the epochs the boot
    // before reserved (about 4 s at most, src/backends/file/epochs.ts).
    extraRecoveryMs: 5000,
    nemesis: (ctx) =>
      every(ctx, 3 * TTL, () =>
        ctx.fault('reboot+cleaner', 'host', () =>
          ctx.replaceAll(async () => {
            await ctx.store.reboot!()
            // A tmp cleaner right after the boot: sometimes one key's folder, sometimes the whole root.
            await ctx.store.deleteState!(ctx.rng() < 0.5 ? ctx.key : undefined)
          }),
        ),
      ),
  },
  {
    id: 'S21',
    title: 'each client cut off from a different Redlock node (a minority) for 2 x ttl every 3 x ttl',
    ...FENCED,
    applies: (t) => t.features.has('redlock'),
    // The nodes see different clients: no majority of them agrees on who is missing, which a single
    // client's cut (S4) never shows.
    nemesis: (ctx) =>
      every(ctx, 3 * TTL, () =>
        ctx.fault('split-nodes', 'all clients', async () => {
          const live = ctx.workers.filter((w) => !w.exited)
          const offset = Math.floor(ctx.rng() * ctx.store.ports.length)
          const cut = live.map((w, i) => w.proxies[(i + offset) % w.proxies.length]!)
          for (const p of cut) p.mode = 'blackhole'
          await ctx.sleep(2 * TTL)
          for (const p of cut) {
            p.mode = 'pass'
            p.cut()
          }
        }),
      ),
  },
  {
    id: 'S22',
    title: "an operator breaks the holder's lock (fencelock break) every 2 x ttl while others wait",
    ...FENCED,
    // Every chaos target's backend breaks a lock by its key (Redis's fair mode, which cannot, is no target).
    applies: () => true,
    // The broken holder acts on until its next renewal fails; the checker ends its validity at the break's
    // invoke, so the next grant is no A1, and its stale writes are the resource's to refuse (A3). A break
    // that ends a waiter granted on top of the grant it found shows as A8 (and as A1: the grant it found
    // was never reported broken, so its validity runs on).
    nemesis: (ctx) =>
      every(ctx, 2 * TTL, async () => {
        if (await holderOf(ctx)) await ctx.breakLock()
      }),
  },
  // Leader election under the nemeses that matter most to a leader: paused past its lease, killed,
  // campaigns given up at any await point. The same rules as a lock's: one valid leader at a time, terms
  // that increase, a paused ex-leader's late write refused by its term.
  {
    id: 'L2',
    title: 'election: the leader paused 2.5 x ttl every 3 x ttl',
    ...FENCED,
    primitive: 'election',
    applies: (t) => t.primitives.has('election'),
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'L4',
    title: 'election: the leader cut off from the store (blackhole) for 2 x ttl every 4 x ttl',
    ...FENCED,
    primitive: 'election',
    applies: (t) => t.networked && t.primitives.has('election'),
    nemesis: cutOffHolder,
  },
  {
    id: 'L7',
    title: 'election: the leader killed (SIGKILL) every 2 x ttl; a new candidate takes its place',
    ...FENCED,
    primitive: 'election',
    applies: (t) => t.primitives.has('election'),
    nemesis: (ctx) => every(ctx, 2 * TTL, () => killHolder(ctx)),
  },
  {
    id: 'L15',
    title: 'election: half of all campaigns given up at a random await point',
    ...FENCED,
    primitive: 'election',
    ttlMs: 4 * TTL,
    abortAcquiresWithinMs: 20,
    applies: (t) => t.primitives.has('election'),
  },
  // Semaphores: four workers on a limit of 2, each taking one permit. The rule that matters is A1 counted:
  // never a grant while 2 other permits are valid; sequences unique and increasing (A2); no stuck waiter.
  {
    id: 'M2',
    title: 'semaphore (limit 2): a holder paused 2.5 x ttl every 3 x ttl',
    ...SEMAPHORE,
    applies: (t) => t.primitives.has('semaphore'),
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'M7',
    title: 'semaphore (limit 2): a holder killed (SIGKILL) every 2 x ttl; a new worker takes its place',
    ...SEMAPHORE,
    applies: (t) => t.primitives.has('semaphore'),
    nemesis: (ctx) => every(ctx, 2 * TTL, () => killHolder(ctx)),
  },
  {
    id: 'M15',
    title: 'semaphore (limit 2): half of all acquires given up at a random await point',
    ...SEMAPHORE,
    ttlMs: 4 * TTL,
    abortAcquiresWithinMs: 20,
    applies: (t) => t.primitives.has('semaphore'),
  },
  // Slots semaphores: four workers on a limit of 2, each taking one slot, on a fenced resource per slot
  // key: each slot is a lock, so the lock's rules hold per slot (one valid holder, increasing fences,
  // stale writes refused by the slot's fence), and two slots bound the permits held.
  {
    id: 'N2',
    title: 'slots semaphore (limit 2): a holder paused 2.5 x ttl every 3 x ttl',
    ...SLOTS,
    applies: (t) => t.primitives.has('slots'),
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'N7',
    title: 'slots semaphore (limit 2): a holder killed (SIGKILL) every 2 x ttl; a new worker takes its place',
    ...SLOTS,
    applies: (t) => t.primitives.has('slots'),
    nemesis: (ctx) => every(ctx, 2 * TTL, () => killHolder(ctx)),
  },
  // Multi-key locks: four workers each taking two or three of three keys, in random orders (now and then a
  // key twice), all or none. The per-key rules hold for each key (one valid holder, fences per key, stale
  // writes refused by that key's fence); an acquire left waiting for ever is a deadlock (A7: stuck).
  ...MULTI_KEY,
  // The same, each acquisition taking its keys in one atomic step of the store (where it offers one).
  ...MULTI_KEY.map(
    (scenario): Scenario => ({
      ...scenario,
      id: scenario.id.replace('K', 'KA'),
      title: `atomic ${scenario.title}`,
      primitive: 'multikey-atomic',
      applies: (t) => t.primitives.has('multikey-atomic'),
    }),
  ),
  // Read-write locks: the rules that matter are A1 by mode (a writer beside nobody, readers only beside
  // readers), the fences (a writer's above every earlier grant, a reader's above every earlier writer's),
  // the writers' fenced writes, and no stuck waiter: no reader stream starves a writer.
  {
    id: 'R2',
    title: 'rwlock: a holder (reader or writer) paused 2.5 x ttl every 3 x ttl',
    ...RWLOCK,
    applies: (t) => t.primitives.has('rwlock'),
    nemesis: (ctx) => every(ctx, 3 * TTL, () => pauseHolder(ctx, 2.5 * TTL)),
  },
  {
    id: 'R7',
    title: 'rwlock: a holder (reader or writer) killed (SIGKILL) every 2 x ttl; a new worker takes its place',
    ...RWLOCK,
    applies: (t) => t.primitives.has('rwlock'),
    nemesis: (ctx) => every(ctx, 2 * TTL, () => killHolder(ctx)),
  },
  {
    id: 'R15',
    title: 'rwlock: half of all acquires given up at a random await point',
    ...RWLOCK,
    ttlMs: 4 * TTL,
    abortAcquiresWithinMs: 20,
    applies: (t) => t.primitives.has('rwlock'),
  },
]

/** The short CI set: the scenarios the issue names, on the stores that start in a second. */
export const CI_SCENARIOS = [
  'S1',
  'S2',
  'S4',
  'S5',
  'S7',
  'S8',
  'S13',
  'S14',
  'S11',
  'S6',
  'S15',
  'S16',
  'S17',
  'S18',
  'S19',
  'S20',
  'S21',
  'S22',
  'L2',
  'L4',
  'L7',
  'L15',
  'M7',
  'M15',
  'N7',
  'R15',
]
