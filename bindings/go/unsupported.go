//go:build !linux

package idmint

// The binding links the static library `cargo build -p idmint-ffi` makes
// with the system libraries of Linux (the #cgo linux lines of link_*.go);
// it is built and tested on Linux only, so elsewhere it stops here, naming
// why, rather than at a link error.
var _ = idmintGoBindingIsBuiltOnLinuxOnly
