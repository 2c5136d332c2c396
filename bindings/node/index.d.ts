// Type declarations of the `idmint` package (index.js over the addon
// idmint.node). IDs are always `bigint`: an ID argument may be a `number`
// only while it is a safe integer, and any other number is refused with
// `invalid_id` rather than rounded.

import ErrorCodes = require('./codes')

/**
 * Every stable error code, generated from idmint's one list (codes.d.ts):
 * `ErrorCode.CLOCK_BEHIND` is `'clock_behind'`. Match `IdmintError.code`
 * against these.
 */
export declare const ErrorCode: typeof ErrorCodes

/**
 * An idmint failure. `code` is idmint's stable error code, the same as the
 * server's (`clock_behind`, `mark_reached`, `key_not_found`, `unavailable`,
 * `invalid_layout_text`, `workers_exhausted`, `worker_taken`, ...), plus
 * `closed` (a call after `close()`). `message` is
 * `"<code>: <what went wrong>"`.
 */
export class IdmintError extends Error {
  readonly name: 'IdmintError'
  /** The stable, machine-readable code. */
  readonly code: string
  /** How long to wait before a retry may succeed, or null when retrying can't help. */
  readonly retryAfterMs: number | null
}

/** The most IDs one `Generator#nextIds` call makes. */
export const MAX_BATCH: number
/** `server.max_count` when a config doesn't set it: the most IDs one
 * `Segments#nextIds` call takes by default. */
export const DEFAULT_MAX_COUNT: number

/** An ID taken apart by `Layout.decode`. */
export interface Decoded {
  id: bigint
  /** The start of the ID's tick. */
  time: Date
  /** `time` in milliseconds since the Unix epoch. */
  timestampMs: number
  /** Time units since the layout's epoch. */
  tick: bigint
  datacenter: number
  worker: number
  rollback: number
  sequence: number
}

/** The parts `Layout.compose` puts together: `time` or `tick`, not both. */
export interface ComposeParts {
  time?: Date
  tick?: bigint | number
  datacenter?: number
  worker?: number
  sequence?: number
  rollback?: number
}

/** A layout, from the text form the CLI and config take. */
export class Layout {
  /** `'twitter'`, `'baidu,epoch=2024-01-01'`, `'time=41,unit=1ms,...'`. */
  constructor(text: string)
  /** Takes an ID apart. */
  decode(id: bigint | number): Decoded
  /** Puts an ID together. */
  compose(parts: ComposeParts): bigint
  /** The first instant the layout can't hold, or null past the year 9999. */
  readonly runsOutAt: Date | null
  /** The preset's name (`twitter`, ...), or null for a custom layout. */
  readonly preset: string | null
  /** IDs per second one worker can make. */
  readonly idsPerSecondPerWorker: number
  /** Worker IDs the node field holds. */
  readonly workers: bigint
  /** Whether `other` is the same layout. */
  equals(other: Layout): boolean
  /** The text form, which `new Layout` reads back. */
  toString(): string
}

/** How a generator with a fixed worker ID makes IDs. */
export interface GeneratorOptions {
  /** The layout (text form or a Layout); `twitter` by default. */
  layout?: string | Layout
  /** The worker ID; 0 by default. The caller keeps it unique across processes. */
  worker?: number
  /** The datacenter part of the node field, for layouts that have one. */
  datacenter?: number
  /** When the clock is behind: `'wait:5ms'` (the default), `'fail'`, `'borrow:1s'`, `'rollback-bits'`, `'history:64'`. */
  clockBehind?: string
  /** When a tick's sequence runs out: `'wait'` (the default) or `'borrow:1s'`. */
  sequenceExhausted?: string
  /** Where each tick's sequence starts: `'zero'` (the default) or `'random:100'`. */
  sequenceStart?: string
  /** The raw wall clock instead of the default (the wall clock read once, advanced by the monotonic clock). */
  wallClock?: boolean
}

/** The registry, worker ID and lease of a generator. */
export interface GeneratorStatus {
  /** The registry (`fixed` for a fixed worker ID). */
  registry: string
  /** The worker ID issued with. */
  worker: number
  /** `held`, `renewing`, `expired`, `lost`, `stopped`. */
  lease: string
  /** Why the generator would refuse now, or null. */
  notReady: string | null
}

/**
 * Snowflake IDs in this process, with a fixed worker ID or one leased from
 * the registry of an `idmint serve` config.
 *
 * Safe to share between worker threads: pass `handle` to a thread, which
 * takes the same generator with `Generator.fromHandle(handle)`. Closing any
 * object on it closes it for all; it also closes when the last object on it
 * is collected, and at the process's normal exit.
 */
export class Generator {
  constructor(options?: GeneratorOptions)
  /** From the `[snowflake]` section of a config file: claims a worker ID (blocking). */
  static fromConfig(path: string): Generator
  /** As `fromConfig`, claiming on libuv's thread pool. */
  static fromConfigAsync(path: string): Promise<Generator>
  /** The generator whose `handle` this is, from any thread of this process. */
  static fromHandle(handle: number): Generator
  /** Names this generator in every thread of this process. */
  readonly handle: number
  /** True for an object made by `Generator.fromHandle`. */
  readonly fromHandleMade: boolean
  /** The next ID. */
  nextId(): bigint
  /** `n` IDs in increasing order. */
  nextIds(n: number | bigint): BigInt64Array
  /** Releases the lease and stops the generator's thread. Idempotent. */
  close(): void
  /** The layout IDs are made with. */
  readonly layout: Layout
  /** The worker ID issued with now. */
  readonly worker: number
  status(): GeneratorStatus
}

/** Segment keys from the `[segment]` store of an `idmint serve` config. */
export class Segments {
  /** Opens the store, creates the declared keys, starts the preloader (blocking). */
  static fromConfig(path: string, options?: { floors?: boolean }): Segments
  /** As `fromConfig`, opening the store on libuv's thread pool. */
  static fromConfigAsync(path: string, options?: { floors?: boolean }): Promise<Segments>
  /** The allocator whose `handle` this is, from any thread of this process. */
  static fromHandle(handle: number): Segments
  readonly handle: number
  /** The next ID of `key`. */
  nextId(key: string): bigint
  /** `n` IDs of `key` in increasing order. */
  nextIds(key: string, n: number | bigint): BigInt64Array
  /** The most IDs one `nextIds` call takes: the config's `server.max_count`. */
  readonly maxCount: number
  /** Stops the preloader and closes the store. Idempotent. */
  close(): void
}

/** Settings of public IDs, as the `[obfuscation]` section's. */
export interface PublicIdsOptions {
  /** The width of public IDs in bits (63 by default). */
  bits?: number
  /** Bits of the public ID that name the key (0 by default). */
  keyIdBits?: number
  /** The key that obfuscates (by default the last key listed). */
  activeKey?: number
  /** `'dec'` (the default), `'base32'` or `'sqids'`. */
  format?: string
}

/** Keyed, reversible obfuscation of IDs for the public, and its text forms. */
export class PublicIds {
  /** `key`: 32 hex digits, or a ring `'0:<hex> 1:<hex>'`. */
  constructor(key: string, options?: PublicIdsOptions)
  /** From the `[obfuscation]` section of a config (and `IDMINT_OBFUSCATION_KEY`). */
  static fromConfig(path: string): PublicIds
  obfuscate(id: bigint | number): bigint
  reveal(publicId: bigint | number): bigint
  /** A public ID in the text form. */
  encode(publicId: bigint | number): string
  /** The public ID a text reads as. */
  decode(text: string): bigint
  obfuscateText(id: bigint | number): string
  revealText(text: string): bigint
  readonly format: 'dec' | 'base32' | 'sqids'
  readonly bits: number
}
