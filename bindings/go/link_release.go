//go:build !idmint_debug

package idmint

// The static library `cargo build --profile release-lto -p idmint-ffi`
// makes, in the workspace's target/ (the README's build step).

// #cgo linux LDFLAGS: ${SRCDIR}/../../target/release-lto/libidmint_ffi.a -lgcc_s -lutil -lrt -lpthread -lm -ldl
import "C"
