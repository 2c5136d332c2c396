//! The one integration-test binary of `idmint-registry`: each registry against
//! the real service it talks to, with shared helpers in `support`.

mod file;
mod keeper;
mod redis;
mod sql;
mod support;
