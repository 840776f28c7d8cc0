import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { describeNetworkError } from '../../src/core/errors.js'
import {
  BackendUnavailableError,
  CapabilityError,
  ClientClosedError,
  DriverMissingError,
  type FencelockErrorCode,
  LockError,
  type LockErrorContext,
  LockLostError,
  LockNotAcquiredError,
  LockReleasedError,
  QuorumError,
} from '../../src/index.js'

type AnyErrorClass = abstract new (...args: never[]) => LockError

interface Row {
  readonly name: string
  readonly code: string
  readonly make: (message: string, context?: LockErrorContext) => LockError
  /** Every class it must be an instance of, besides its own, LockError and Error. */
  readonly is: readonly AnyErrorClass[]
  /** Classes it must not be an instance of. */
  readonly isNot: readonly AnyErrorClass[]
}

const failures = [{ node: 'redis://a:6379', error: new Error('ECONNREFUSED') }]

const rows: readonly Row[] = [
  {
    name: 'LockError',
    code: 'FENCELOCK_KEY_CONFLICT',
    make: (m, c) => new LockError('FENCELOCK_KEY_CONFLICT', m, c),
    is: [],
    isNot: [LockNotAcquiredError, BackendUnavailableError],
  },
  {
    name: 'LockNotAcquiredError',
    code: 'FENCELOCK_NOT_ACQUIRED',
    make: (m, c) => new LockNotAcquiredError(m, c),
    is: [],
    isNot: [BackendUnavailableError, LockLostError],
  },
  {
    name: 'LockLostError',
    code: 'FENCELOCK_LOST',
    make: (m, c) => new LockLostError(m, c),
    is: [],
    isNot: [LockReleasedError, LockNotAcquiredError],
  },
  {
    name: 'LockReleasedError',
    code: 'FENCELOCK_RELEASED',
    make: (m, c) => new LockReleasedError(m, c),
    is: [],
    isNot: [LockLostError],
  },
  {
    name: 'BackendUnavailableError',
    code: 'FENCELOCK_BACKEND_UNAVAILABLE',
    make: (m, c) => new BackendUnavailableError(m, c),
    is: [],
    isNot: [LockNotAcquiredError, QuorumError],
  },
  {
    name: 'QuorumError',
    code: 'FENCELOCK_QUORUM',
    make: (m, c) => new QuorumError(m, failures, c),
    is: [BackendUnavailableError],
    isNot: [LockNotAcquiredError],
  },
  {
    name: 'CapabilityError',
    code: 'FENCELOCK_CAPABILITY',
    make: (m, c) => new CapabilityError(m, c),
    is: [],
    isNot: [BackendUnavailableError],
  },
  {
    name: 'DriverMissingError',
    code: 'FENCELOCK_DRIVER_MISSING',
    make: (m, c) => new DriverMissingError('ioredis', m, c),
    is: [],
    isNot: [BackendUnavailableError],
  },
  {
    name: 'ClientClosedError',
    code: 'FENCELOCK_CLIENT_CLOSED',
    make: (m, c) => new ClientClosedError(m, c),
    is: [],
    isNot: [BackendUnavailableError, LockNotAcquiredError],
  },
]

describe('errors', () => {
  for (const row of rows) {
    describe(row.name, () => {
      it('has its name, a stable code, the key, the backend and the cause', () => {
        const cause = new Error('socket hang up')
        const error = row.make('Lock "jobs:42" is broken', {
          key: 'jobs:42',
          backend: 'redis://127.0.0.1:6379',
          cause,
        })
        assert.equal(error.name, row.name)
        assert.equal(error.code, row.code)
        assert.equal(error.key, 'jobs:42')
        assert.equal(error.backend, 'redis://127.0.0.1:6379')
        assert.equal(error.cause, cause)
        assert.equal(error.message, 'Lock "jobs:42" is broken')
        assert.ok(String(error).startsWith(`${row.name}: `))
        assert.ok(error.stack?.includes(row.name))
      })

      it('has the right instanceof relations', () => {
        const error = row.make('x')
        assert.ok(error instanceof Error)
        assert.ok(error instanceof LockError)
        assert.equal(error.constructor.name, row.name)
        for (const parent of row.is) assert.ok(error instanceof parent, `instanceof ${parent.name}`)
        for (const other of row.isNot) assert.ok(!(error instanceof other), `not instanceof ${other.name}`)
      })

      it('leaves key, backend and cause unset when not given', () => {
        const error = row.make('x')
        assert.equal(error.key, undefined)
        assert.equal(error.backend, undefined)
        assert.ok(!('cause' in error), 'no own cause property')
      })
    })
  }

  it('gives every class its own FENCELOCK_ code', () => {
    const codes = rows.filter((r) => r.name !== 'LockError').map((r) => r.code)
    for (const code of codes) assert.match(code, /^FENCELOCK_[A-Z_]+$/)
    assert.equal(new Set(codes).size, codes.length)
  })

  it('types each code as a literal, so a misspelled code does not compile', () => {
    const error: LockError = new LockNotAcquiredError('x')
    // @ts-expect-error: no such code (the compiler catches the typo; the assertion only uses the value)
    assert.equal(error.code === 'FENCELOCK_NOT_ACQIURED', false)
    const exact: 'FENCELOCK_NOT_ACQUIRED' = new LockNotAcquiredError('x').code
    const quorum: 'FENCELOCK_QUORUM' = new QuorumError('x', failures).code
    // A BackendUnavailableError may be a QuorumError: its code type says so.
    const unavailable: 'FENCELOCK_BACKEND_UNAVAILABLE' | 'FENCELOCK_QUORUM' = new BackendUnavailableError('x')
      .code
    const anyCode: FencelockErrorCode = error.code
    assert.deepEqual(
      [exact, quorum, unavailable, anyCode],
      [
        'FENCELOCK_NOT_ACQUIRED',
        'FENCELOCK_QUORUM',
        'FENCELOCK_BACKEND_UNAVAILABLE',
        'FENCELOCK_NOT_ACQUIRED',
      ],
    )
  })

  it('BackendUnavailableError is retryable unless it says otherwise', () => {
    assert.equal(new BackendUnavailableError('down').retryable, true)
    assert.equal(new BackendUnavailableError('WRONGPASS', { retryable: false }).retryable, false)
    assert.equal(new BackendUnavailableError('down', { retryable: undefined }).retryable, true)
    assert.equal(new QuorumError('no majority', failures).retryable, true)
  })

  it('QuorumError lists the failing nodes', () => {
    const error = new QuorumError('no majority', failures, { key: 'k' })
    assert.deepEqual(error.failures, failures)
  })

  it('DriverMissingError names the package to install', () => {
    assert.equal(new DriverMissingError('ioredis', 'install ioredis').packageName, 'ioredis')
  })

  it('describeNetworkError reads past an error whose code is a number (an HTTP status, as GCS errors have)', () => {
    const cause = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' })
    const error = Object.assign(new Error('Service Unavailable', { cause }), { code: 503 })
    assert.equal(
      describeNetworkError(error, '127.0.0.1:9'),
      'connection refused at 127.0.0.1:9 (is the server running, on this port?)',
    )
  })
})
