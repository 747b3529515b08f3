// Types of studio-locks (index.js): studio's lock API from Node 20+ and Bun.

/** The longest wait the server takes in one acquire; longer waits ask again. */
export declare const MAX_WAIT_PER_REQUEST_MS: number;

export interface FieldError {
  field: string;
  message: string;
}

/** The server refused a call; `status` is 0 when it could not be reached. */
export declare class LockError extends Error {
  constructor(status: number, detail: string, fields?: FieldError[]);
  readonly status: number;
  readonly detail: string;
  readonly fields: FieldError[];
}

/** The key was not free within the wait (HTTP 423). */
export declare class LockTimeoutError extends LockError {}

/** The lease ended before its holder was done (expired, lost, or unknown to the server). */
export declare class LeaseLostError extends LockError {}

export interface HoldOptions {
  /** Lease TTL in milliseconds, 500..3 600 000; default 30 000. Renewed every ttl/3. */
  ttlMs?: number;
  /** Longest wait in milliseconds; null (the default) waits as long as it takes. */
  waitMs?: number | null;
  /** 0 (default): a lock. N > 0: one of N slots of a semaphore. */
  limit?: number;
}

export interface Holder {
  fence: number;
  expires_at: string;
}

export interface Info {
  name: string;
  key: string;
  limit: number;
  held: boolean;
  holders: Holder[];
  /** Acquires waiting for the key on that server. */
  waiters: number;
}

export declare class LockClient {
  constructor(options: { url: string; token: string; timeoutMs?: number });
  /** A client for $STUDIO_SERVER (or $STUDIO_URL) with the token $STUDIO_TOKEN; throws a LockError naming a missing one. */
  static fromEnv(): LockClient;
  /** The named lock `name`, with defaults for its holds. */
  lock(name: string, defaults?: HoldOptions): NamedLock;
  /** One call of the API; throws LockError for an error answer. */
  call(method: string, path: string, body: object | undefined, timeoutMs?: number): Promise<any>;
}

export declare class NamedLock {
  readonly name: string;
  /** Waits for the key; throws LockTimeoutError when waitMs runs out. */
  hold(key: string, options?: HoldOptions): Promise<Lease>;
  /** The lease if the key is free now, else null. */
  tryHold(key: string, options?: Omit<HoldOptions, "waitMs">): Promise<Lease | null>;
  /**
   * Holds the key while fn runs, then releases it. `signal` aborts (reason:
   * a LeaseLostError) when the lease is lost. If the lease was lost and fn
   * did not throw, withLock throws the LeaseLostError.
   */
  withLock<T>(key: string, fn: (signal: AbortSignal, lease: Lease) => Promise<T> | T, options?: HoldOptions): Promise<T>;
  /** Who holds the key (fences and expiries, never lease ids) and how many wait. */
  inspect(key: string, options?: { limit?: number }): Promise<Info>;
}

export declare class Lease {
  readonly requestId: string;
  readonly name: string;
  readonly key: string;
  readonly limit: number;
  /** Larger than every earlier fence of the key: send it with every protected write. */
  readonly fence: number;
  readonly ttlMs: number;
  /** When the lease ends (server clock) unless renewed; updated by each renewal. */
  readonly expiresAt: string;
  /** Aborts, with a LeaseLostError as its reason, when the lease is lost. */
  readonly signal: AbortSignal;
  readonly lost: boolean;
  /** Throws the LeaseLostError if the lease was lost. */
  check(): void;
  /** Releases the lease (once); throws a LeaseLostError if it had been lost. */
  release(): Promise<void>;
}
