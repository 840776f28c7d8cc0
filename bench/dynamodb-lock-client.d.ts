// dynamodb-lock-client 0.7.3 ships no types: the part of its API the bench uses (index.js, README).
declare module 'dynamodb-lock-client' {
  type Callback<T = void> = (error?: Error, value?: T) => void
  interface DocumentLike {
    get(params: unknown, callback: Callback<unknown>): unknown
    put(params: unknown, callback: Callback<unknown>): unknown
    delete(params: unknown, callback: Callback<unknown>): unknown
  }
  namespace DynamoDBLockClient {
    interface Lock {
      readonly fencingToken: number
      release(callback: Callback): void
    }
    interface FailOpenConfig {
      dynamodb: DocumentLike
      lockTable: string
      partitionKey: string
      leaseDurationMs: number
      heartbeatPeriodMs?: number
      trustLocalTime?: boolean
      retryCount?: number
      owner?: string
    }
    class FailOpen {
      constructor(config: FailOpenConfig)
      acquireLock(id: string, callback: Callback<Lock>): void
    }
  }
  export default DynamoDBLockClient
}
