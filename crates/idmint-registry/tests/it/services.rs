//! Private instances of the services, for tests that stop them mid-run: the
//! workspace's test kit starts them with the project's own scripts.

pub use idmint_testkit::{PrivateService, Service};
