import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { PrometheusExporter } from '@opentelemetry/exporter-prometheus'
import { MeterProvider } from '@opentelemetry/sdk-metrics'
import { createLockClient } from 'fencelock'
import { instrument } from 'fencelock/otel'

// The exporter renders the metrics for Prometheus; here your own HTTP server serves them on /metrics
// (without `preventServerStart` the exporter serves them itself, on port 9464).
const exporter = new PrometheusExporter({ preventServerStart: true })
const meterProvider = new MeterProvider({ readers: [exporter] })
const stopInstrumenting = instrument({ meterProvider })

const server = createServer((request, response) => {
  if (request.url === '/metrics') exporter.getMetricsRequestHandler(request, response)
  else response.writeHead(404).end()
})
server.listen(Number(process.env.PORT ?? 9464), '127.0.0.1')
await once(server, 'listening')

const locks = createLockClient('memory:', { ttl: '15s' })
await locks.withLock('reports:nightly', async (lock) => {
  console.log(`holding ${lock.key} with fence ${lock.fence}`)
})
console.log(`metrics on http://127.0.0.1:${(server.address() as AddressInfo).port}/metrics`)

process.once('SIGTERM', async () => {
  stopInstrumenting()
  await locks.close()
  server.close()
  await meterProvider.shutdown()
})
