//go:build idmint_debug

package idmint

// With `-tags idmint_debug`: the static library `cargo build -p idmint-ffi`
// makes with the dev profile (scripts/go-binding's tests use it: the
// dependencies are then the ones `cargo test` compiled already).

// #cgo linux LDFLAGS: ${SRCDIR}/../../target/debug/libidmint_ffi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
import "C"
