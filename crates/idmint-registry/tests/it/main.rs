//! The one integration-test binary of `idmint-registry`: each registry against
//! the real service it talks to, with shared helpers in `support`.

mod etcd;
mod file;
mod keeper;
mod redis;
mod redis_outage;
mod sql;
mod support;
mod zookeeper;
