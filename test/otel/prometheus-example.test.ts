/**
 * docs/observability.md's Prometheus example is examples/otel-prometheus.ts, verbatim: compiled with the
 * tests, run here as a child on a free loopback port, scraped as Prometheus would, then stopped with
 * SIGTERM (its shutdown path) by PID.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import { it } from 'node:test'
import { fileURLToPath } from 'node:url'

const root = fileURLToPath(new URL('../../../', import.meta.url))

it('docs/observability.md shows examples/otel-prometheus.ts verbatim', () => {
  const page = readFileSync(`${root}docs/observability.md`, 'utf8')
  const example = readFileSync(`${root}examples/otel-prometheus.ts`, 'utf8')
  assert.ok(page.includes(`\`\`\`ts\n${example}\`\`\``), 'docs/observability.md and the example differ')
})

it(
  'examples/otel-prometheus.ts serves fencelock metrics that Prometheus can scrape',
  { timeout: 60_000 },
  async () => {
    const child = spawn(process.execPath, [`${root}build/examples/otel-prometheus.js`], {
      env: { ...process.env, PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const exited = once(child, 'exit')
    exited.catch(() => {})
    let stdout = ''
    let stderr = ''
    child.stderr.on('data', (chunk) => {
      stderr += chunk
    })
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no metrics URL within 30 s:\n${stdout}${stderr}`)),
          30_000,
        )
        child.stdout.on('data', (chunk) => {
          stdout += chunk
          const found = /metrics on (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(stdout)?.[1]
          if (found) {
            clearTimeout(timer)
            resolve(found)
          }
        })
        child.once('exit', (code) => {
          clearTimeout(timer)
          reject(new Error(`the example exited (${code}) before serving:\n${stdout}${stderr}`))
        })
      })
      assert.match(stdout, /^holding reports:nightly with fence \d+$/m)
      const response = await fetch(url)
      assert.equal(response.status, 200)
      const text = await response.text()
      const granted =
        'fencelock_backend="memory",fencelock_store="memory:",fencelock_acquire_outcome="granted"'
      assert.match(text, new RegExp(`^fencelock_acquire_duration_count\\{${granted}[^}]*\\} 1$`, 'm'))
      assert.match(text, /^fencelock_acquire_wait_time_bucket\{fencelock_backend="memory",/m)
      assert.match(
        text,
        /^fencelock_lock_held\{fencelock_backend="memory",fencelock_store="memory:"[^}]*\} 0$/m,
      )
      assert.match(
        text,
        /^fencelock_lock_hold_duration_count\{[^}]*fencelock_hold_outcome="released"[^}]*\} 1$/m,
      )
      assert.doesNotMatch(text, /reports:nightly/, 'keys stay out of the metrics by default')
    } finally {
      child.kill('SIGTERM')
    }
    const [code, signal] = await exited
    assert.equal(signal, null, `the example did not shut down on SIGTERM:\n${stderr}`)
    assert.equal(code, 0, stderr)
  },
)
