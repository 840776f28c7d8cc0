/**
 * The server faults of a replicated store whose members the test harness runs (etcd, ZooKeeper): the
 * same for every such store, so each kit takes them from here.
 */
import type { KitStore } from './kit.js'

/** A member process of the store's cluster (test/servers: etcd, zookeeper). */
export interface ClusterMember {
  signal(signal: NodeJS.Signals): void
  restart(): Promise<unknown>
}

/** Kills a member (SIGKILL) and starts it again on its ports and data. */
async function crashMember(member: ClusterMember): Promise<void> {
  member.signal('SIGKILL')
  await member.restart()
}

/** crash, restart, pause and killLeader over `members`, whose current leader `leader()` names. */
export function memberFaults(
  members: readonly ClusterMember[],
  leader: () => Promise<ClusterMember>,
): Required<Pick<KitStore, 'crash' | 'restart' | 'pause' | 'killLeader'>> {
  return {
    crash: (node = 0) => crashMember(members[node % members.length]!),
    async restart() {
      // All down first, then all up together: a member alone cannot serve without a quorum.
      for (const m of members) m.signal('SIGKILL')
      await Promise.all(members.map((m) => m.restart()))
    },
    pause(node = 0) {
      const member = members[node % members.length]!
      member.signal('SIGSTOP')
      return () => member.signal('SIGCONT')
    },
    killLeader: async () => crashMember(await leader()),
  }
}
