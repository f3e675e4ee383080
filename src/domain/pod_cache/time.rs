//! Time as the pod cache sees it: a value passed in, never read.

use std::fmt;
use std::ops::Add;
use std::time::Duration;

/// A point in time, as the duration since the Unix epoch.
///
/// The driver passes the wall clock (`SystemTime::now()` since
/// `UNIX_EPOCH`); the simulator and the tests pass virtual time. The unit of
/// the [`RECLAIM_AFTER_ANNOTATION`](super::RECLAIM_AFTER_ANNOTATION) is whole
/// seconds, so every reclaim-after the machine computes is rounded *up* to a
/// whole second: a replica reading the annotation never sees an earlier
/// expiry than the one the writer keeps in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixTime(Duration);

impl UnixTime {
    /// The epoch itself (useful as the start of virtual time).
    pub const EPOCH: UnixTime = UnixTime(Duration::ZERO);

    /// The time `since_epoch` after the Unix epoch.
    pub const fn from_duration(since_epoch: Duration) -> Self {
        UnixTime(since_epoch)
    }

    /// The time `secs` whole seconds after the Unix epoch.
    pub const fn from_secs(secs: u64) -> Self {
        UnixTime(Duration::from_secs(secs))
    }

    /// The duration since the Unix epoch.
    pub const fn as_duration(self) -> Duration {
        self.0
    }

    /// Whole seconds since the Unix epoch (truncated).
    pub const fn as_secs(self) -> u64 {
        self.0.as_secs()
    }

    /// This time rounded up to the next whole second (unchanged if already whole).
    pub fn ceil_secs(self) -> Self {
        let secs = self
            .0
            .as_secs()
            .saturating_add(u64::from(self.0.subsec_nanos() > 0));
        UnixTime::from_secs(secs)
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: UnixTime) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self - d`, or the epoch if `d` is longer.
    pub fn saturating_sub(self, d: Duration) -> UnixTime {
        UnixTime(self.0.saturating_sub(d))
    }

    /// Parses a reclaim-after annotation value: decimal Unix seconds, digits
    /// only (Porch Gen A writes `strconv.FormatInt(unix, 10)`).
    ///
    /// Returns `None` for anything else (empty, signs, spaces, overflow); the
    /// caller then treats the annotation as missing and grants a grace period.
    pub fn parse_annotation(value: &str) -> Option<Self> {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        value.parse::<u64>().ok().map(UnixTime::from_secs)
    }

    /// The annotation form: whole seconds, rounded up, as a decimal string.
    pub fn to_annotation(self) -> String {
        self.ceil_secs().as_secs().to_string()
    }
}

impl Add<Duration> for UnixTime {
    type Output = UnixTime;

    /// Saturates at the largest representable time instead of panicking.
    fn add(self, rhs: Duration) -> UnixTime {
        UnixTime(self.0.checked_add(rhs).unwrap_or(Duration::MAX))
    }
}

impl fmt::Display for UnixTime {
    /// Seconds since the epoch with millisecond precision, e.g. `1700000000.250s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0.as_secs(), self.0.subsec_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotation_round_trip_rounds_up() {
        let t = UnixTime::from_duration(Duration::from_millis(10_250));
        assert_eq!(t.to_annotation(), "11");
        assert_eq!(
            UnixTime::parse_annotation("11"),
            Some(UnixTime::from_secs(11))
        );
        assert_eq!(UnixTime::from_secs(7).ceil_secs(), UnixTime::from_secs(7));
        let end = UnixTime::from_secs(1) + Duration::MAX;
        assert_eq!(
            end.ceil_secs().as_secs(),
            u64::MAX,
            "saturates, no overflow"
        );
    }

    #[test]
    fn invalid_annotations_are_none() {
        for bad in ["", "-1", "+5", " 5", "5s", "1.5", "99999999999999999999999"] {
            assert_eq!(UnixTime::parse_annotation(bad), None, "{bad:?}");
        }
    }
}
