//! RFC 9562 UUIDs (versions 1, 3, 4, 5 and 7) on top of the `uuid` crate.
//!
//! idmint's own strategies make 63-bit integers; this module is for callers who
//! need a UUID instead (a column typed `uuid`, an API that expects one). All the
//! bit-level work is the `uuid` crate's: this module adds a [`UuidGenerator`] that
//! reads time from an idmint [`Clock`] (so tests inject a
//! [`ManualClock`](crate::clock::ManualClock)), keeps v7 UUIDs strictly monotonic
//! across threads, and names versions and namespaces the way the CLI, the config
//! file and the server's `GET /v1/uuid?version=7` spell them.
//!
//! # References
//!
//! - [RFC 9562](https://www.rfc-editor.org/rfc/rfc9562): §5.1 (v1), §5.3 (v3),
//!   §5.4 (v4), §5.5 (v5), §5.7 (v7), §6.2 (monotonicity and counters),
//!   §6.6 (namespace IDs), §6.10 (random node IDs).

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};

use uuid::{ContextV1, ContextV7, Timestamp};

pub use uuid::Uuid;

use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};

/// A UUID version this crate generates.
///
/// Parses from `"1"`, `"v1"` (any case), and likewise for 3, 4, 5 and 7; displays
/// as `v1`, `v3`, ...
///
/// # Examples
///
/// ```
/// use idmint_core::uuid::UuidVersion;
///
/// assert_eq!("7".parse::<UuidVersion>()?, UuidVersion::V7);
/// assert_eq!("V4".parse::<UuidVersion>()?, UuidVersion::V4);
/// assert_eq!(UuidVersion::V5.to_string(), "v5");
/// assert!("6".parse::<UuidVersion>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UuidVersion {
    /// Gregorian time (100 ns ticks), a 14-bit clock sequence and a 6-byte node ID
    /// (RFC 9562 §5.1).
    V1,
    /// MD5 of a namespace and a name (RFC 9562 §5.3).
    V3,
    /// 122 random bits (RFC 9562 §5.4).
    V4,
    /// SHA-1 of a namespace and a name (RFC 9562 §5.5).
    V5,
    /// Unix milliseconds, a 42-bit counter and random bits; sortable by time
    /// (RFC 9562 §5.7).
    V7,
}

impl UuidVersion {
    /// Every version, in numeric order.
    pub const ALL: [UuidVersion; 5] = [
        UuidVersion::V1,
        UuidVersion::V3,
        UuidVersion::V4,
        UuidVersion::V5,
        UuidVersion::V7,
    ];

    /// The version number, as stored in the UUID's version field.
    pub const fn number(self) -> u8 {
        match self {
            UuidVersion::V1 => 1,
            UuidVersion::V3 => 3,
            UuidVersion::V4 => 4,
            UuidVersion::V5 => 5,
            UuidVersion::V7 => 7,
        }
    }

    /// True for v3 and v5, which are derived from a namespace and a name rather
    /// than generated: the same inputs always give the same UUID.
    pub const fn is_name_based(self) -> bool {
        matches!(self, UuidVersion::V3 | UuidVersion::V5)
    }
}

impl fmt::Display for UuidVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.number())
    }
}

impl FromStr for UuidVersion {
    type Err = Error;

    /// Parses `1`, `v1`, `V1`, ... for versions 1, 3, 4, 5 and 7.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the input and the accepted versions.
    fn from_str(s: &str) -> Result<UuidVersion> {
        let digits = s
            .strip_prefix('v')
            .or_else(|| s.strip_prefix('V'))
            .unwrap_or(s);
        UuidVersion::ALL
            .into_iter()
            .find(|v| digits.len() == 1 && digits.as_bytes()[0] == b'0' + v.number())
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "unknown UUID version {s:?}: expected 1, 3, 4, 5 or 7 (or v1, v3, v4, v5, v7)"
                ))
            })
    }
}

/// The namespace of a name-based (v3 or v5) UUID: one of RFC 9562's standard
/// namespaces, or any UUID.
///
/// Parses from `dns`, `url`, `oid`, `x500` (any case) or a UUID in any of the
/// `uuid` crate's text forms.
///
/// # Examples
///
/// ```
/// use idmint_core::uuid::{Uuid, UuidNamespace};
///
/// let ns: UuidNamespace = "dns".parse()?;
/// assert_eq!(ns.uuid(), Uuid::NAMESPACE_DNS);
/// let custom: UuidNamespace = "6ba7b810-9dad-11d1-80b4-00c04fd430c8".parse()?;
/// assert_eq!(custom, UuidNamespace::Dns, "the DNS namespace's UUID is recognised");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # References
///
/// RFC 9562 §6.6 (namespace ID usage and allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UuidNamespace {
    /// `6ba7b810-9dad-11d1-80b4-00c04fd430c8`: names are fully qualified domain names.
    Dns,
    /// `6ba7b811-9dad-11d1-80b4-00c04fd430c8`: names are URLs.
    Url,
    /// `6ba7b812-9dad-11d1-80b4-00c04fd430c8`: names are ISO object identifiers.
    Oid,
    /// `6ba7b814-9dad-11d1-80b4-00c04fd430c8`: names are X.500 distinguished names.
    X500,
    /// Any other namespace UUID (RFC 9562 recommends a v4 or v7 UUID of your own).
    Custom(Uuid),
}

impl UuidNamespace {
    /// The four standard namespaces with their names.
    pub const STANDARD: [(&'static str, UuidNamespace); 4] = [
        ("dns", UuidNamespace::Dns),
        ("url", UuidNamespace::Url),
        ("oid", UuidNamespace::Oid),
        ("x500", UuidNamespace::X500),
    ];

    /// The namespace's UUID.
    pub const fn uuid(self) -> Uuid {
        match self {
            UuidNamespace::Dns => Uuid::NAMESPACE_DNS,
            UuidNamespace::Url => Uuid::NAMESPACE_URL,
            UuidNamespace::Oid => Uuid::NAMESPACE_OID,
            UuidNamespace::X500 => Uuid::NAMESPACE_X500,
            UuidNamespace::Custom(uuid) => uuid,
        }
    }

    /// The namespace for a UUID: a standard one when it is one of theirs.
    pub fn from_uuid(uuid: Uuid) -> UuidNamespace {
        UuidNamespace::STANDARD
            .into_iter()
            .map(|(_, ns)| ns)
            .find(|ns| ns.uuid() == uuid)
            .unwrap_or(UuidNamespace::Custom(uuid))
    }
}

impl fmt::Display for UuidNamespace {
    /// The standard name (`dns`, ...) or the hyphenated UUID.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match UuidNamespace::STANDARD.iter().find(|(_, ns)| ns == self) {
            Some((name, _)) => f.write_str(name),
            None => fmt::Display::fmt(&self.uuid(), f),
        }
    }
}

impl FromStr for UuidNamespace {
    type Err = Error;

    /// Parses `dns`, `url`, `oid`, `x500` (any case) or a UUID.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] naming the input when it is neither.
    fn from_str(s: &str) -> Result<UuidNamespace> {
        if let Some(&(_, ns)) = UuidNamespace::STANDARD
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(s))
        {
            return Ok(ns);
        }
        Uuid::parse_str(s)
            .map(UuidNamespace::from_uuid)
            .map_err(|_| {
                Error::InvalidConfig(format!(
                    "unknown UUID namespace {s:?}: expected dns, url, oid, x500 or a UUID"
                ))
            })
    }
}

/// Makes RFC 9562 UUIDs, with time read from an idmint [`Clock`].
///
/// - **Thread-safety:** `Send + Sync`; share one generator (in an `Arc` or a
///   `static`) across threads.
/// - **v7 monotonicity:** v7 UUIDs from one generator strictly increase, across
///   threads too: each is greater than every v7 UUID the generator returned
///   before it was called (RFC 9562 §6.2, method 1: a 42-bit counter seeded
///   randomly each millisecond, `uuid`'s [`ContextV7`]).
/// - **v7 when the counter runs out** (2^41 or more UUIDs in one millisecond):
///   the embedded time moves one millisecond ahead of the clock, so order holds.
/// - **v7 when the clock goes back:** the embedded time stays at the last
///   millisecond issued and the counter keeps counting, until the clock passes
///   it again; UUIDs never go backwards. The default clock
///   ([`MonotonicClock`]) does not go back while the process runs.
/// - **v1:** the clock sequence is `uuid`'s [`ContextV1`], seeded randomly and
///   incremented on every UUID (14 bits), so UUIDs of the same 100 ns tick
///   differ; more than 16,384 v1 UUIDs in one tick (possible only with a stopped
///   clock) would repeat. v1 UUIDs are unique, not sortable.
/// - **v4** is random; **v3/v5** are pure functions of namespace and name.
///
/// # Examples
///
/// ```
/// use idmint_core::uuid::{UuidGenerator, UuidNamespace, UuidVersion};
///
/// let generator = UuidGenerator::new().with_node_id([0x02, 0, 0, 0, 0, 0x2a]);
/// let a = generator.next_v7();
/// let b = generator.next(UuidVersion::V7)?;
/// assert!(a < b);
/// assert_eq!(b.get_version_num(), 7);
/// assert_eq!(generator.next_v1().get_node_id(), Some([0x02, 0, 0, 0, 0, 0x2a]));
///
/// let named = UuidGenerator::name_based(UuidVersion::V5, UuidNamespace::Dns, b"www.example.com")?;
/// assert_eq!(named.to_string(), "2ed6657d-e927-568b-95e1-2665a8aea6a2");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # References
///
/// RFC 9562 §5.1, §5.3–§5.5, §5.7, §6.2.
#[derive(Debug)]
pub struct UuidGenerator {
    clock: Arc<dyn Clock>,
    node_id: [u8; 6],
    /// Atomic inside (`uuid` documents it as thread-safe), so it is shared as is.
    v1_context: ContextV1,
    /// `ContextV7` keeps its last timestamp and counter in `Cell`s: it is `Send`
    /// but not `Sync` (`uuid` says to wrap it in a mutex to share it). The lock is
    /// held only for the counter step (no clock read, no random fill, no UUID
    /// assembly), and that step is what orders v7 UUIDs across threads. A std
    /// `Mutex` rather than `crate::sync`'s: the state is `uuid`'s, not ours, and
    /// there is nothing lock-free here for loom to check.
    v7_context: Mutex<ContextV7>,
}

impl UuidGenerator {
    /// A generator on a [`MonotonicClock`] started now, with a random node ID for
    /// v1 (multicast bit set, as RFC 9562 §6.10 asks of node IDs that are not
    /// IEEE 802 addresses) and a random v1 clock sequence.
    pub fn new() -> UuidGenerator {
        let random = Uuid::new_v4().into_bytes();
        let mut node_id = [0; 6];
        node_id.copy_from_slice(&random[..6]);
        node_id[0] |= 0x01;
        UuidGenerator {
            clock: Arc::new(MonotonicClock::new()),
            node_id,
            v1_context: ContextV1::new_random(),
            v7_context: Mutex::new(ContextV7::new()),
        }
    }

    /// The time source for v1 and v7 UUIDs (default: a [`MonotonicClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> UuidGenerator {
        self.clock = clock;
        self
    }

    /// The 6-byte node ID written into v1 UUIDs (default: random, multicast bit set).
    pub fn with_node_id(mut self, node_id: [u8; 6]) -> UuidGenerator {
        self.node_id = node_id;
        self
    }

    /// The node ID written into v1 UUIDs.
    pub fn node_id(&self) -> [u8; 6] {
        self.node_id
    }

    /// The time source.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// A UUID of a generated version (v1, v4, v7).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] for v3 and v5, which need a namespace and a name:
    /// use [`UuidGenerator::name_based`].
    pub fn next(&self, version: UuidVersion) -> Result<Uuid> {
        match version {
            UuidVersion::V1 => Ok(self.next_v1()),
            UuidVersion::V4 => Ok(self.next_v4()),
            UuidVersion::V7 => Ok(self.next_v7()),
            UuidVersion::V3 | UuidVersion::V5 => Err(Error::InvalidConfig(format!(
                "UUID {version} is name-based: give a namespace and a name"
            ))),
        }
    }

    /// A version 7 UUID: the clock's Unix milliseconds, then a counter, then
    /// random bits; strictly greater than every v7 UUID this generator made before.
    ///
    /// A clock before 1970 counts as 1970-01-01T00:00:00Z.
    pub fn next_v7(&self) -> Uuid {
        let (secs, nanos) = self.unix_now();
        let ts = {
            let context = self
                .v7_context
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Timestamp::from_unix(&*context, secs, nanos)
        };
        Uuid::new_v7(ts)
    }

    /// A version 1 UUID from the clock, the clock sequence and the node ID.
    ///
    /// A clock before 1970 counts as 1970-01-01T00:00:00Z.
    pub fn next_v1(&self) -> Uuid {
        let (secs, nanos) = self.unix_now();
        Uuid::new_v1(
            Timestamp::from_unix(&self.v1_context, secs, nanos),
            &self.node_id,
        )
    }

    /// A version 4 (random) UUID.
    pub fn next_v4(&self) -> Uuid {
        Uuid::new_v4()
    }

    /// The version 3 (MD5) UUID of `name` in `namespace`.
    pub fn v3(namespace: UuidNamespace, name: &[u8]) -> Uuid {
        Uuid::new_v3(&namespace.uuid(), name)
    }

    /// The version 5 (SHA-1) UUID of `name` in `namespace`.
    pub fn v5(namespace: UuidNamespace, name: &[u8]) -> Uuid {
        Uuid::new_v5(&namespace.uuid(), name)
    }

    /// The name-based UUID of `version` (v3 or v5) for `name` in `namespace`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `version` is not v3 or v5.
    pub fn name_based(version: UuidVersion, namespace: UuidNamespace, name: &[u8]) -> Result<Uuid> {
        match version {
            UuidVersion::V3 => Ok(UuidGenerator::v3(namespace, name)),
            UuidVersion::V5 => Ok(UuidGenerator::v5(namespace, name)),
            UuidVersion::V1 | UuidVersion::V4 | UuidVersion::V7 => {
                Err(Error::InvalidConfig(format!(
                    "UUID {version} is not name-based: only v3 and v5 take a namespace and a name"
                )))
            }
        }
    }

    /// The clock as (seconds, nanoseconds) since the Unix epoch, clamped at the epoch.
    fn unix_now(&self) -> (u64, u32) {
        let nanos = u64::try_from(self.clock.now_nanos()).unwrap_or(0);
        (nanos / 1_000_000_000, (nanos % 1_000_000_000) as u32)
    }
}

impl Default for UuidGenerator {
    fn default() -> UuidGenerator {
        UuidGenerator::new()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn generator_is_send_and_sync() {
        assert_send_sync::<UuidGenerator>();
    }

    #[test]
    fn versions_parse_with_or_without_v() {
        for (text, v) in [
            ("1", UuidVersion::V1),
            ("v3", UuidVersion::V3),
            ("V4", UuidVersion::V4),
            ("5", UuidVersion::V5),
            ("v7", UuidVersion::V7),
        ] {
            assert_eq!(text.parse::<UuidVersion>(), Ok(v), "{text}");
            assert_eq!(v.to_string().parse::<UuidVersion>(), Ok(v));
        }
        for bad in ["", "v", "2", "6", "8", "77", "v 4", "seven", "-4"] {
            let err = bad.parse::<UuidVersion>().unwrap_err();
            assert_eq!(err.code(), "invalid_config", "{bad:?}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn namespaces_parse_by_name_or_uuid() {
        assert_eq!("DNS".parse::<UuidNamespace>(), Ok(UuidNamespace::Dns));
        assert_eq!("x500".parse::<UuidNamespace>(), Ok(UuidNamespace::X500));
        assert_eq!(
            Uuid::NAMESPACE_URL.to_string().parse::<UuidNamespace>(),
            Ok(UuidNamespace::Url)
        );
        let own = Uuid::new_v4();
        assert_eq!(
            own.to_string().parse::<UuidNamespace>(),
            Ok(UuidNamespace::Custom(own))
        );
        assert_eq!(UuidNamespace::Custom(own).to_string(), own.to_string());
        assert_eq!(UuidNamespace::Oid.to_string(), "oid");
        assert!("isbn".parse::<UuidNamespace>().is_err());
    }

    #[test]
    fn name_based_known_vectors() {
        // Published vectors for www.example.com in the DNS namespace, which the
        // uuid crate reproduces (RFC 9562 Appendix A.2 uses the same namespace).
        let v5 = UuidGenerator::v5(UuidNamespace::Dns, b"www.example.com");
        assert_eq!(v5.to_string(), "2ed6657d-e927-568b-95e1-2665a8aea6a2");
        assert_eq!(v5, Uuid::new_v5(&Uuid::NAMESPACE_DNS, b"www.example.com"));
        let v3 = UuidGenerator::v3(UuidNamespace::Dns, b"www.example.com");
        assert_eq!(v3.to_string(), "5df41881-3aed-3515-88a7-2f4a814cf09e");
        assert_eq!(v3, Uuid::new_v3(&Uuid::NAMESPACE_DNS, b"www.example.com"));
        assert_eq!(
            UuidGenerator::name_based(UuidVersion::V5, UuidNamespace::Dns, b"www.example.com"),
            Ok(v5)
        );
        assert!(UuidGenerator::name_based(UuidVersion::V4, UuidNamespace::Dns, b"x").is_err());
        assert!(UuidGenerator::new().next(UuidVersion::V3).is_err());
    }

    #[test]
    fn v7_is_strictly_monotonic_across_two_threads() {
        const PER_THREAD: usize = 100_000;
        let generator = UuidGenerator::new();
        let per_thread: Vec<Vec<Uuid>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        (0..PER_THREAD)
                            .map(|_| generator.next_v7())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ids in &per_thread {
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "each thread sees increasing UUIDs"
            );
            assert!(ids.iter().all(|u| u.get_version_num() == 7));
        }
        let all: HashSet<Uuid> = per_thread.iter().flatten().copied().collect();
        assert_eq!(all.len(), 2 * PER_THREAD, "no UUID twice");
        // Strictly monotonic in call order: after both threads, a new UUID is
        // above every one of them.
        let next = generator.next_v7();
        assert!(all.iter().all(|&u| u < next));
    }

    fn unix_millis(uuid: Uuid) -> u64 {
        let (secs, nanos) = uuid.get_timestamp().expect("time-based UUID").to_unix();
        secs * 1000 + u64::from(nanos) / 1_000_000
    }

    #[test]
    fn v7_takes_time_from_the_injected_clock() {
        let clock = ManualClock::at_millis(1_700_000_000_123);
        let generator = UuidGenerator::new().with_clock(Arc::new(clock.clone()));
        let a = generator.next_v7();
        assert_eq!(unix_millis(a), 1_700_000_000_123);
        assert!(a.to_string().starts_with("018bcfe5-687b-7"), "{a}");

        clock.advance(Duration::from_millis(5));
        let b = generator.next_v7();
        assert_eq!(unix_millis(b), 1_700_000_000_128);

        // A step back: the time stays at the last millisecond issued, order holds.
        clock.step_back(Duration::from_secs(60));
        let c = generator.next_v7();
        assert_eq!(unix_millis(c), 1_700_000_000_128);
        assert!(a < b && b < c);

        clock.advance(Duration::from_secs(61));
        assert_eq!(unix_millis(generator.next_v7()), 1_700_000_001_128);
    }

    #[test]
    fn v7_on_a_stopped_clock_still_increases() {
        let clock = ManualClock::at_millis(1_700_000_000_000);
        let generator = UuidGenerator::new().with_clock(Arc::new(clock));
        let ids: Vec<Uuid> = (0..10_000).map(|_| generator.next_v7()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn v1_carries_clock_time_node_id_and_changing_sequence() {
        let clock = ManualClock::at_millis(1_700_000_000_123);
        let node = [0x03, 0x11, 0x22, 0x33, 0x44, 0x55];
        let generator = UuidGenerator::new()
            .with_clock(Arc::new(clock))
            .with_node_id(node);
        let a = generator.next_v1();
        let b = generator.next_v1();
        assert_eq!(a.get_version_num(), 1);
        assert_eq!(a.get_node_id(), Some(node));
        assert_eq!(unix_millis(a), 1_700_000_000_123);
        assert_ne!(a, b, "same tick, different clock sequence");
        let seq = |u: Uuid| u.get_timestamp().unwrap().to_gregorian().1;
        assert_eq!(seq(b), (seq(a) + 1) & 0x3fff);
    }

    #[test]
    fn default_node_id_is_random_with_the_multicast_bit() {
        let a = UuidGenerator::new();
        let b = UuidGenerator::new();
        assert_eq!(a.node_id()[0] & 1, 1);
        assert_ne!(a.node_id(), b.node_id());
        assert_eq!(a.next_v1().get_node_id(), Some(a.node_id()));
    }

    #[test]
    fn v4_is_random() {
        let generator = UuidGenerator::new();
        let ids: HashSet<Uuid> = (0..1000).map(|_| generator.next_v4()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|u| u.get_version_num() == 4));
    }

    #[test]
    fn clock_before_1970_counts_as_the_unix_epoch() {
        let generator = UuidGenerator::new().with_clock(Arc::new(ManualClock::at_millis(-5)));
        assert_eq!(unix_millis(generator.next_v7()), 0);
    }
}
