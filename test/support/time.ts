/**
 * Time for tests: the library's own `sleep` and the host's monotonic clock, imported rather than copied
 * (a copy drifts from what the code under test does).
 */
export { monotonicMs } from '../../src/backends/file/host-clock.js'
export { sleep } from '../../src/core/clock.js'
