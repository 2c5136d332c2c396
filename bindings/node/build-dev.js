#!/usr/bin/env node
// `npm run build:dev`: the addon in cargo's dev profile, for working on
// idmint itself (scripts/node-binding runs it). It does what `napi build`
// does, a `cargo build` of this crate and a copy of the library to
// idmint.node, but without the `--target` flag `napi build` always passes:
// with it, cargo builds every dependency again under target/<triple>/,
// where here they are shared with `cargo test --workspace` in target/debug.
// It also writes native.d.ts, the declarations napi generates (types.js).
// Users build with `npm run build` (`napi build --profile release-lto`).
'use strict'

const { execFileSync } = require('node:child_process')
const { copyFileSync, mkdirSync, writeFileSync } = require('node:fs')
const { join } = require('node:path')
const { render } = require('./types')

const crate = 'idmint-nodejs'
const cargo = process.env.CARGO || 'cargo'
const metadata = JSON.parse(
  execFileSync(cargo, ['metadata', '--format-version', '1', '--no-deps'], {
    cwd: __dirname,
    maxBuffer: 64 << 20,
  }),
)
// napi-derive writes the addon's type definitions here as it compiles, as
// under `napi build`; types.js renders them into native.d.ts, which
// `node types.js check` holds index.d.ts to. The folder is always the
// same, so the variable never makes cargo compile the crate again.
const typeDefs = join(metadata.target_directory, 'napi-type-defs')
mkdirSync(typeDefs, { recursive: true })
execFileSync(cargo, ['build', '-p', crate], {
  cwd: __dirname,
  stdio: 'inherit',
  env: { ...process.env, NAPI_TYPE_DEF_TMP_FOLDER: typeDefs },
})
writeFileSync(join(__dirname, 'native.d.ts'), render(join(typeDefs, crate)))
const stem = crate.replace(/-/g, '_')
const library = {
  darwin: `lib${stem}.dylib`,
  win32: `${stem}.dll`,
}[process.platform] ?? `lib${stem}.so`
const built = join(metadata.target_directory, 'debug', library)
copyFileSync(built, join(__dirname, 'idmint.node'))
console.log(`built ${built} -> idmint.node`)
