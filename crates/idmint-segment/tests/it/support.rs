//! Helpers shared by the integration tests: the workspace's test kit.

pub use idmint_testkit::{
    MYSQL_URL, POSTGRES_URL, PrivateService, REDIS_URL, Service, require_service,
};
