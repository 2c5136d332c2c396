// idmint in your Node.js process: fleet-safe snowflake IDs (a worker ID
// leased from a registry, the high-water mark persisted ahead, clock
// policies, a fence when the lease is lost), segment keys and public IDs, on
// the same Rust core as `idmint serve`.
//
//   const { Generator, Layout } = require('idmint')
//   const g = new Generator({ layout: 'twitter', worker: 7 })
//   const id = g.nextId()                       // a bigint
//   console.log(new Layout('twitter').decode(id).time)
//
// The addon (idmint.node, built by `npm run build`, or the prebuilt one of
// the platform package) does the work; this file adds the error class and
// the close at exit. See README.md.
'use strict'

const { isMainThread } = require('node:worker_threads')
const native = loadAddon()

// The addon: ./idmint.node when built in place (`npm run build`, a
// checkout), else the platform package npm installed beside this one from
// its optionalDependencies (napi-rs's per-platform layout, as the
// @node-rs packages ship: @idmint/linux-x64-gnu holds the prebuilt
// linux-x64-gnu addon).
function loadAddon() {
  try {
    return require('./idmint.node')
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e
  }
  const libc = process.report?.getReport?.().header?.glibcVersionRuntime ? 'gnu' : 'musl'
  const name = `@idmint/${process.platform}-${process.arch}-${libc}`
  try {
    return require(name)
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e
    throw new Error(
      `idmint: no addon for ${process.platform}-${process.arch}-${libc}: neither ./idmint.node ` +
        `(built from a checkout) nor the package ${name} (installed with idmint where it exists; ` +
        `prebuilt for linux-x64-gnu only) was found`,
    )
  }
}

/**
 * An idmint failure: `.code` is idmint's stable error code (`clock_behind`,
 * `mark_reached`, `key_not_found`, `unavailable`, `closed`, ...), `.message`
 * what went wrong, `.retryAfterMs` how long to wait before a retry may
 * succeed (or null when retrying can't help).
 */
class IdmintError extends Error {
  constructor(code, message, retryAfterMs) {
    super(`${code}: ${message}`)
    this.name = 'IdmintError'
    this.code = code
    this.retryAfterMs = retryAfterMs ?? null
  }
}

// The addon throws every failure as this class, made in the calling
// thread's own environment (each worker thread loads this file anew).
native.setErrorClass(IdmintError)

// Leases are released when the process exits normally (the event loop ran
// out, or process.exit()): from the main thread only, whose exit is the
// process's; a worker thread's exit leaves the generators it shares open.
// A process killed by a signal leaves its lease to run out.
if (isMainThread) {
  process.once('exit', () => native.closeAll())
}

// The hot path. `nextId` goes through plain functions on the generator's
// handle, not methods of the addon's class, whose call glue in napi-rs costs
// several times the ID itself. A generator that one thread alone issues from
// also takes its IDs a few at a time when calls come faster than one a
// millisecond, and hands them out from a buffer in this thread:
// - A buffered ID is handed out within a millisecond of when it was made
//   (a buffer older than that is dropped), so its time is as fresh as a
//   native call's, and it is issued only while the generator was allowed
//   to issue: below the persisted mark, under the lease.
// - The buffer grows while it runs out within a millisecond and shrinks
//   when IDs are left over, so a caller that asks once in a while makes one
//   ID per call, as before.
// - Order: the IDs of one thread's calls strictly increase. A generator
//   shared with other threads (its `handle` read, or made by `fromHandle`)
//   never buffers: another thread's later call must get a larger ID, and a
//   buffered one could be smaller. `nextIds` and `close` drop the buffer
//   first, for the same reason.
// Dropped IDs are never issued again: gaps, never repeats.
const LOCAL = Symbol('idmint.local')
const MAX_BUFFER = 128
const nextIdOf = native.generatorNextId
const nextIdsOf = native.generatorNextIds
const proto = native.Generator.prototype
const handleOf = Object.getOwnPropertyDescriptor(proto, 'handle').get
const nativeNextIds = proto.nextIds
const nativeClose = proto.close

/** What one thread's object on a generator keeps: the handle, and while
 * no other thread shares the generator, a buffer. */
class Local {
  constructor(handle, shared) {
    this.handle = handle
    this.shared = shared
    this.ids = null
    this.next = 0 // the index of the next buffered ID
    this.end = 0 // how many are buffered
    this.ms = 0 // Date.now() when they were made, or of the last call
    this.size = 1 // IDs taken per native call
  }

  take() {
    if (this.shared) return nextIdOf(this.handle)
    const now = Date.now()
    if (this.next < this.end) {
      if (now - this.ms <= 1) return this.ids[this.next++]
      this.size = Math.max(1, this.size >> 1) // left over: calls slowed down
    } else if (now === this.ms) {
      this.size = Math.min(MAX_BUFFER, this.size << 1) // ran out within a ms
    } else if (now - this.ms > 1) {
      this.size = Math.max(1, this.size >> 1)
    }
    this.end = 0
    if (this.size === 1) {
      this.ms = now
      return nextIdOf(this.handle)
    }
    const ids = nextIdsOf(this.handle, this.size)
    this.ms = Date.now()
    this.ids = ids
    this.next = 1
    this.end = ids.length
    return ids[0]
  }
}

/** `g`'s Local, made on first use. */
function localOf(g) {
  return g[LOCAL] ?? (g[LOCAL] = new Local(handleOf.call(g), g.fromHandleMade))
}

/** Marks `g` shared: it never buffers again, and what it buffered is gone. */
function share(g) {
  const local = localOf(g)
  local.shared = true
  local.end = 0
}

Object.defineProperties(proto, {
  nextId: {
    value: function nextId() {
      return (this[LOCAL] ?? localOf(this)).take()
    },
    writable: true,
    configurable: true,
  },
  nextIds: {
    value: function nextIds(n) {
      if (this[LOCAL] !== undefined) this[LOCAL].end = 0
      return nativeNextIds.call(this, n)
    },
    writable: true,
    configurable: true,
  },
  close: {
    value: function close() {
      share(this)
      return nativeClose.call(this)
    },
    writable: true,
    configurable: true,
  },
  // Reading the handle is how a generator is shared with other threads.
  handle: {
    get: function handle() {
      share(this)
      return handleOf.call(this)
    },
    configurable: true,
  },
})

module.exports = {
  // The limits of a batch, as the embedded layer decides them.
  MAX_BATCH: native.maxBatch(),
  DEFAULT_MAX_COUNT: native.defaultMaxCount(),
  Generator: native.Generator,
  Layout: native.Layout,
  Segments: native.Segments,
  PublicIds: native.PublicIds,
  IdmintError,
  // Every stable code, generated from idmint's one list (codes.js).
  ErrorCode: require('./codes'),
}
