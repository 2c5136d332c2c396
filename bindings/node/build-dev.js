#!/usr/bin/env node
// `npm run build:dev`: the addon in cargo's dev profile, for working on
// idmint itself (scripts/node-binding runs it). It does what `napi build`
// does, a `cargo build` of this crate and a copy of the library to
// idmint.node, but without the `--target` flag `napi build` always passes:
// with it, cargo builds every dependency again under target/<triple>/,
// where here they are shared with `cargo test --workspace` in target/debug.
// Users build with `npm run build` (`napi build --release`).
'use strict'

const { execFileSync } = require('node:child_process')
const { copyFileSync } = require('node:fs')
const { join } = require('node:path')

const crate = 'idmint-nodejs'
const cargo = process.env.CARGO || 'cargo'
execFileSync(cargo, ['build', '-p', crate], { cwd: __dirname, stdio: 'inherit' })
const metadata = JSON.parse(
  execFileSync(cargo, ['metadata', '--format-version', '1', '--no-deps'], {
    cwd: __dirname,
    maxBuffer: 64 << 20,
  }),
)
const stem = crate.replace(/-/g, '_')
const library = {
  darwin: `lib${stem}.dylib`,
  win32: `${stem}.dll`,
}[process.platform] ?? `lib${stem}.so`
const built = join(metadata.target_directory, 'debug', library)
copyFileSync(built, join(__dirname, 'idmint.node'))
console.log(`built ${built} -> idmint.node`)
