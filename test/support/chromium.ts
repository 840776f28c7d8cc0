/**
 * A page in headless Chromium (Debian's `chromium`), driven over the DevTools protocol on a pipe
 * (`--remote-debugging-pipe`: commands on fd 3, replies and events on fd 4, NUL-terminated JSON), so a test
 * sees a page as a person's browser shows it: its console and page errors, values evaluated in it, and a
 * screenshot. A pipe, not a WebSocket: Node 20 has no WebSocket client built in.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import type { Readable, Writable } from 'node:stream'
import { requireBinary } from '../servers/process.js'
import { tempDir } from './temp.js'

export const CHROMIUM_INSTALL = 'apt-get install -y chromium'

export interface LoadedPage {
  /** Console errors, uncaught exceptions and failed loads the page reported, in order. */
  readonly errors: string[]
  /** The value of `expression` evaluated in the page (JSON-serialisable). */
  evaluate<T>(expression: string): Promise<T>
  /** A PNG of the whole page, at most `maxHeight` CSS pixels tall. */
  screenshot(maxHeight?: number): Promise<Buffer>
}

/** The fields read from Runtime.exceptionThrown, Runtime.consoleAPICalled and Log.entryAdded. */
interface ErrorEventParams {
  exceptionDetails?: { text: string; exception?: { description?: string } }
  type?: string
  args?: Array<{ value?: unknown; description?: string }>
  entry?: { level: string; source: string; text: string; url?: string }
}

interface Message {
  id?: number
  method?: string
  params?: Record<string, unknown>
  sessionId?: string
  result?: Record<string, unknown>
  error?: { message: string }
}

/** Loads `url` in a fresh headless Chromium, hands the page to `use`, and closes the browser after. */
export async function withPage<T>(
  url: string,
  use: (page: LoadedPage) => Promise<T>,
  { timeoutMs = 90_000 } = {},
): Promise<T> {
  const binary = requireBinary('chromium', CHROMIUM_INSTALL)
  const profile = tempDir('chromium-profile')
  const browser = spawn(
    binary,
    [
      '--headless',
      // Tests run as root in CI, where Chromium's sandbox refuses to start.
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--remote-debugging-pipe',
      `--user-data-dir=${profile.path}`,
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] },
  )
  let log = ''
  browser.stderr!.on('data', (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-4000)
  })
  const cdp = connect(browser, () => log)
  try {
    const deadline = new Promise<never>((_, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`chromium did not load ${url} within ${timeoutMs} ms\n${log}`)),
        timeoutMs,
      )
      browser.once('exit', () => clearTimeout(timer))
    })
    deadline.catch(() => {})
    const { targetId } = await Promise.race([
      cdp.send('Target.createTarget', { url: 'about:blank' }),
      deadline,
    ])
    const { sessionId } = (await cdp.send('Target.attachToTarget', { targetId, flatten: true })) as {
      sessionId: string
    }
    const send = (method: string, params: Record<string, unknown> = {}) => cdp.send(method, params, sessionId)
    const errors: string[] = []
    cdp.onEvent((message) => {
      if (message.sessionId !== sessionId) return
      const p = message.params as ErrorEventParams
      if (message.method === 'Runtime.exceptionThrown')
        errors.push(`exception: ${p.exceptionDetails?.exception?.description ?? p.exceptionDetails?.text}`)
      if (message.method === 'Runtime.consoleAPICalled' && (p.type === 'error' || p.type === 'assert'))
        errors.push(`console.${p.type}: ${p.args?.map((a) => a.value ?? a.description).join(' ')}`)
      if (message.method === 'Log.entryAdded' && p.entry?.level === 'error')
        errors.push(`${p.entry.source}: ${p.entry.text}${p.entry.url ? ` (${p.entry.url})` : ''}`)
    })
    await Promise.all([send('Runtime.enable'), send('Log.enable'), send('Page.enable')])
    const loaded = cdp.nextEvent('Page.loadEventFired', sessionId)
    const navigated = (await send('Page.navigate', { url })) as { errorText?: string }
    if (navigated.errorText) throw new Error(`chromium could not open ${url}: ${navigated.errorText}`)
    await Promise.race([loaded, deadline])
    return await use({
      errors,
      async evaluate<V>(expression: string) {
        const { result, exceptionDetails } = (await send('Runtime.evaluate', {
          expression,
          returnByValue: true,
        })) as { result: { value: V }; exceptionDetails?: { text: string } }
        if (exceptionDetails) throw new Error(`evaluating in the page failed: ${exceptionDetails.text}`)
        return result.value
      },
      async screenshot(maxHeight = 20_000) {
        // A desktop's width first: the page's height depends on it.
        await send('Emulation.setDeviceMetricsOverride', {
          width: 1280,
          height: 800,
          deviceScaleFactor: 1,
          mobile: false,
        })
        const { cssContentSize } = (await send('Page.getLayoutMetrics')) as {
          cssContentSize: { width: number; height: number }
        }
        await send('Emulation.setDeviceMetricsOverride', {
          width: Math.max(1280, Math.ceil(cssContentSize.width)),
          height: Math.min(maxHeight, Math.ceil(cssContentSize.height)),
          deviceScaleFactor: 1,
          mobile: false,
        })
        const { data } = (await send('Page.captureScreenshot', { format: 'png' })) as { data: string }
        return Buffer.from(data, 'base64')
      },
    })
  } finally {
    await cdp.close()
    profile.cleanup()
  }
}

/** The protocol over the browser's fds 3 and 4: numbered commands, their replies, and events. */
function connect(browser: ChildProcess, log: () => string) {
  const input = browser.stdio[3] as Writable
  const output = browser.stdio[4] as Readable
  const pending = new Map<number, { resolve(r: Record<string, unknown>): void; reject(e: Error): void }>()
  const listeners: Array<(m: Message) => void> = []
  let nextId = 1
  let buffered = ''
  let exited: Error | undefined
  output.on('data', (chunk: Buffer) => {
    buffered += chunk.toString()
    let end = buffered.indexOf('\0')
    while (end >= 0) {
      const message = JSON.parse(buffered.slice(0, end)) as Message
      buffered = buffered.slice(end + 1)
      end = buffered.indexOf('\0')
      if (message.id !== undefined) {
        const waiter = pending.get(message.id)
        pending.delete(message.id)
        if (message.error) waiter?.reject(new Error(`chromium: ${message.error.message}`))
        else waiter?.resolve(message.result ?? {})
      } else for (const listener of listeners) listener(message)
    }
  })
  // Writing to a browser that died raises EPIPE here; the exit below rejects what was pending.
  input.on('error', () => {})
  const exit = new Promise<void>((resolve) =>
    browser.once('exit', (code, signal) => {
      exited = new Error(`chromium exited (${signal ?? code})\n${log()}`)
      for (const waiter of pending.values()) waiter.reject(exited)
      pending.clear()
      resolve()
    }),
  )
  return {
    send(method: string, params: Record<string, unknown> = {}, sessionId?: string) {
      if (exited) return Promise.reject(exited)
      const id = nextId++
      const reply = new Promise<Record<string, unknown>>((resolve, reject) =>
        pending.set(id, { resolve, reject }),
      )
      input.write(`${JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) })}\0`)
      return reply
    },
    onEvent(listener: (m: Message) => void) {
      listeners.push(listener)
    },
    nextEvent(method: string, sessionId: string) {
      const seen = new Promise<void>((resolve) =>
        listeners.push((m) => {
          if (m.method === method && m.sessionId === sessionId) resolve()
        }),
      )
      return seen
    },
    /** Asks the browser to close, and stops it by its pid if it has not within 10 s. */
    async close() {
      if (!exited) {
        input.write(`${JSON.stringify({ id: nextId++, method: 'Browser.close', params: {} })}\0`)
        const timer = setTimeout(() => browser.kill('SIGKILL'), 10_000)
        await exit
        clearTimeout(timer)
      }
    },
  }
}
