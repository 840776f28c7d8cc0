/**
 * DynamoDB Local for the tests: Amazon's own jar (1.25.1, from the npm package amplify-dynamodb-simulator,
 * which scripts/test-all.sh unpacks into .cache/dynamodb-local), run by `java` on a free port in a temp
 * folder of its own. A start is retried on fresh ports (see ports.ts), and every error carries its log tail.
 *
 * It keeps its tables in that folder (`-dbPath`), not in memory (`-inMemory`): a restart, even after a
 * SIGKILL, then finds every lock record as it was, which is what the durable-fences cases and the chaos
 * crashes need (DynamoDB itself never forgets a written item). `-sharedDb` (the default here) makes one
 * database for every access key and region; without it (`sharedDb: false`) each access key and region
 * has tables of its own, as AWS has per account and region, which a test of a wrong region needs.
 * `-disableTelemetry` always.
 *
 * DynamoDB Local listens on all interfaces (it has no option to limit it): clients use 127.0.0.1 only.
 */
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { createServer, request, type Server } from 'node:http'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb'
import { type TempDir, tempDir } from '../support/temp.js'
import { onFreshPorts, type PickPorts } from './ports.js'
import { againOnPort, FolderServer, requireBinary, ServerProcess } from './process.js'

/** Where scripts/test-all.sh unpacks the jar (the build runs from build/test/servers). */
export const DYNAMODB_LOCAL_DIR = fileURLToPath(
  new URL('../../../.cache/dynamodb-local/package/emulator', import.meta.url),
)

/** What installs the jar, for the error that says it is missing. */
export const DYNAMODB_LOCAL_INSTALL =
  'cd .cache/dynamodb-local && npm pack amplify-dynamodb-simulator@2.9.30 && ' +
  'tar xzf amplify-dynamodb-simulator-2.9.30.tgz package/emulator'

/** Fake credentials and a region for clients of the test server (it checks neither; the SDK needs both). */
export const LOCAL_CREDENTIALS = { accessKeyId: 'fencelock', secretAccessKey: 'fencelock' } as const
export const LOCAL_REGION = 'us-east-1'

// The SDK warns once per process on Node < 22 (its releases after January 2027 will need 22); the tests run
// on Node 20 on purpose. Set here, before any client exists, and inherited by the processes the tests start.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'

/** The fake credentials where the SDK's default chain looks (URL-made clients): here and in child processes. */
export function useLocalCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID ??= LOCAL_CREDENTIALS.accessKeyId
  process.env.AWS_SECRET_ACCESS_KEY ??= LOCAL_CREDENTIALS.secretAccessKey
}

/** A client of the test server at `endpoint` (fake credentials, fixed region); the caller destroys it. */
export function localClient(endpoint: string, config: DynamoDBClientConfig = {}): DynamoDBClient {
  return new DynamoDBClient({ endpoint, region: LOCAL_REGION, credentials: LOCAL_CREDENTIALS, ...config })
}

/** A running DynamoDB Local: stop, signal, destroy, log, dir and pid as every folder server has them. */
export interface DynamoDbServer
  extends Pick<FolderServer, 'dir' | 'pid' | 'stop' | 'signal' | 'destroy' | 'log'> {
  readonly port: number
  /** `http://127.0.0.1:<port>`, for a client's `endpoint`. */
  readonly endpoint: string
  /** Starts it again on the same port and folder: its tables and items are kept. */
  restart(): Promise<void>
}

export interface DynamoDbOptions {
  /** Where fresh ports come from. @default freePorts (the OS's) */
  readonly pickPorts?: PickPorts
  /** The unpacked `package/emulator` folder. @default DYNAMODB_LOCAL_DIR */
  readonly emulatorDir?: string
  /** One database for every access key and region (`-sharedDb`). @default true */
  readonly sharedDb?: boolean
}

/**
 * Whether process `pid` has a listening TCP socket on `port` (Linux: /proc/net/tcp{,6} and the process's
 * file descriptors). Another server on our port would answer our HTTP check as well, and the JVM takes a
 * second or two before it even tries to bind; so readiness asks who listens, not just whether someone does.
 */
function listensOn(pid: number, port: number): boolean {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`
  const inodes = new Set<string>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    if (!existsSync(table)) continue
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      // sl local_address rem_address st ... inode: state 0A is LISTEN.
      const f = line.trim().split(/\s+/)
      if (f[1]?.endsWith(hex) && f[3] === '0A' && f[9]) inodes.add(`socket:[${f[9]}]`)
    }
  }
  if (inodes.size === 0) return false
  const fds = `/proc/${pid}/fd`
  return readdirSync(fds).some((fd) => {
    try {
      return inodes.has(readlinkSync(join(fds, fd)))
    } catch {
      return false // closed while we looked
    }
  })
}

/** Whether DynamoDB Local answers a ListTables on `port` (the API call every client makes work first). */
async function answers(port: number): Promise<boolean> {
  const reply = await fetch(`http://127.0.0.1:${port}/`, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-amz-json-1.0',
      'x-amz-target': 'DynamoDB_20120810.ListTables',
      // DynamoDB Local wants a SigV4-shaped header; it does not check the signature.
      authorization: `AWS4-HMAC-SHA256 Credential=${LOCAL_CREDENTIALS.accessKeyId}/20240101/${LOCAL_REGION}/dynamodb/aws4_request, SignedHeaders=host, Signature=0`,
    },
    body: '{}',
    signal: AbortSignal.timeout(2000),
  })
  return reply.ok && Array.isArray(((await reply.json()) as { TableNames?: unknown }).TableNames)
}

/** The JVM does not exit when Jetty cannot bind its port (other threads keep it alive): its log says so. */
const BIND_FAILED = /Failed to bind|Address already in use/

async function launch(
  java: string,
  jar: string,
  port: number,
  dir: string,
  sharedDb: boolean,
): Promise<ServerProcess> {
  const emulator = join(jar, '..')
  const proc = new ServerProcess(
    `DynamoDB Local on port ${port}`,
    java,
    [
      // A small heap: the tests keep a few tables of small items; two cores and other servers share the machine.
      '-Xmx256m',
      // The quick compiler only, and one GC thread: a test's server lives seconds to minutes, over which the
      // optimizing compiler's work never pays back; with it a start took twice as long and twice the CPU.
      '-XX:TieredStopAtLevel=1',
      '-XX:+UseSerialGC',
      `-Djava.library.path=${join(emulator, 'DynamoDBLocal_lib')}`,
      ...['-jar', jar, '-port', String(port), '-dbPath', dir],
      ...(sharedDb ? ['-sharedDb'] : []),
      '-disableTelemetry',
    ],
    dir,
  )
  const ready = async () => {
    // Stopping it ends the wait at once, with the log tail that names the taken port.
    if (BIND_FAILED.test(proc.log())) proc.child.kill('SIGTERM')
    return listensOn(proc.pid, port) && (await answers(port))
  }
  try {
    // A cold JVM on a busy machine: DynamoDB Local is ready in 2-6 s, give it far more.
    await proc.untilReady(ready, 60_000)
    return proc
  } catch (error) {
    await proc.stop()
    throw error
  }
}

class RunningDynamoDb extends FolderServer implements DynamoDbServer {
  readonly endpoint: string

  constructor(
    readonly port: number,
    folder: TempDir,
    readonly command: { readonly java: string; readonly jar: string; readonly sharedDb: boolean },
    proc: ServerProcess,
  ) {
    super(folder)
    this.endpoint = `http://127.0.0.1:${port}`
    this.proc = proc
  }

  async restart(): Promise<void> {
    await this.proc.stop()
    this.proc = await againOnPort(`DynamoDB Local on port ${this.port}`, () =>
      launch(this.command.java, this.command.jar, this.port, this.dir, this.command.sharedDb),
    )
  }
}

/** The jar, or an error naming where it was looked for and the command that installs it. */
export function requireDynamoDbLocal(emulatorDir = DYNAMODB_LOCAL_DIR): string {
  const jar = join(emulatorDir, 'DynamoDBLocal.jar')
  if (!existsSync(jar)) {
    throw new Error(
      `DynamoDB Local is not installed: no ${jar}. Run "npm run test:all", which installs it ` +
        `(from the repository root: ${DYNAMODB_LOCAL_INSTALL}).`,
    )
  }
  return jar
}

/** Starts DynamoDB Local on a free port in its own temp folder (its tables kept there across restarts). */
export async function startDynamoDb(options: DynamoDbOptions = {}): Promise<DynamoDbServer> {
  const jar = requireDynamoDbLocal(options.emulatorDir)
  const java = requireBinary('java', 'apt-get install -y openjdk-17-jre-headless')
  const sharedDb = options.sharedDb ?? true
  const attempt = async ([port]: number[]) => {
    const folder = tempDir('dynamodb')
    try {
      const proc = await launch(java, jar, port!, folder.path, sharedDb)
      return new RunningDynamoDb(port!, folder, { java, jar, sharedDb }, proc)
    } catch (error) {
      folder.cleanup()
      throw error
    }
  }
  return onFreshPorts('DynamoDB Local', 1, attempt, options.pickPorts)
}

/**
 * An HTTP proxy to DynamoDB Local that drops every PutItem's condition: a store that accepts condition
 * expressions and ignores them, which doctor must catch. DynamoDB Local does not check signatures, so the
 * rewritten body needs none.
 */
export async function startLaxProxy(target: number): Promise<{ endpoint: string; close(): Promise<void> }> {
  const proxy: Server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      let body = Buffer.concat(chunks)
      if (req.headers['x-amz-target'] === 'DynamoDB_20120810.PutItem') {
        const input = JSON.parse(body.toString()) as Record<string, unknown>
        delete input.ConditionExpression
        delete input.ExpressionAttributeNames
        delete input.ExpressionAttributeValues
        body = Buffer.from(JSON.stringify(input))
      }
      const headers = { ...req.headers, 'content-length': String(body.length) }
      const out = request(
        { port: target, host: '127.0.0.1', method: req.method, path: req.url, headers },
        (up) => {
          res.writeHead(up.statusCode ?? 500, up.headers)
          up.pipe(res)
        },
      )
      out.on('error', () => res.destroy())
      out.end(body)
    })
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  const { port } = proxy.address() as { port: number }
  return {
    endpoint: `http://127.0.0.1:${port}`,
    close: () => new Promise((resolve) => proxy.close(() => resolve())),
  }
}
