//! Connection ageing: how long a client connection may live before the
//! server asks the client to reconnect, and how long its calls then have.
//!
//! A Kubernetes Service balances per connection, and Porch's client keeps
//! one gRPC connection for as long as it can: every call of a porch-server
//! goes to the runner replica its connection first reached, and a replica
//! added later gets nothing. gRPC servers answer this with a maximum
//! connection age (grpc-go's `MaxConnectionAge`, `MaxConnectionAgeGrace`):
//! once a connection is that old the server sends HTTP/2 GOAWAY, the client
//! opens a new connection (through the Service, so to any replica) for its
//! next calls, and the calls still running on the old one finish there
//! within the grace. Each connection's age is jittered by ±10%, as grpc-go
//! does, so connections opened together (after a rollout) do not all
//! reconnect together.
//!
//! This module holds the settings, their bounds and the jitter; the timers
//! and the GOAWAY are the gRPC server's (`adapters::grpc::connections`).

use std::time::Duration;

/// `--max-connection-age`'s default: 2 minutes (see the book's
/// `docs/src/operators/replicas.md` for the reasoning).
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(120);
/// `--max-connection-age-grace`'s default: 10 minutes, twice the longest
/// call Porch waits for (porch-server v1.5.3 gives each API request, and so
/// each render, 291 s), so ageing never stops a call a client still waits
/// for.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);
/// The shortest age and the shortest grace accepted: 1 second.
///
/// A shorter age makes clients reconnect faster than a reconnection can
/// pay off, and a shorter grace would stop ordinary calls at every age.
pub const MIN_SETTING: Duration = Duration::from_secs(1);
/// The longest age and the longest grace accepted: 365 days (`0` turns
/// ageing off; anything longer is almost surely a typo).
pub const MAX_SETTING: Duration = Duration::from_secs(365 * 24 * 3600);
/// The jitter: each connection's age is drawn uniformly within ±this
/// fraction of the setting (grpc-go's ±10%).
pub const JITTER: f64 = 0.1;

/// Connection ageing settings (`--max-connection-age`,
/// `--max-connection-age-grace`); built by [`ConnectionAge::new`], so
/// always within [`MIN_SETTING`]..=[`MAX_SETTING`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionAge {
    max_age: Duration,
    grace: Duration,
}

/// A connection ageing setting out of bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionAgeError {
    /// The age is below [`MIN_SETTING`] (and not 0) or above [`MAX_SETTING`].
    #[error(
        "--max-connection-age {0:?} is out of range: give 1s to 365d, or 0 to turn connection ageing off"
    )]
    MaxAge(Duration),
    /// The grace is below [`MIN_SETTING`] or above [`MAX_SETTING`].
    #[error(
        "--max-connection-age-grace {0:?} is out of range: give 1s to 365d (longer than the longest call, or ageing stops calls that still run)"
    )]
    Grace(Duration),
}

impl Default for ConnectionAge {
    /// [`DEFAULT_MAX_AGE`] and [`DEFAULT_GRACE`].
    fn default() -> Self {
        Self {
            max_age: DEFAULT_MAX_AGE,
            grace: DEFAULT_GRACE,
        }
    }
}

impl ConnectionAge {
    /// Checks the settings: `max_age` of zero turns ageing off (`Ok(None)`,
    /// the grace is then not used, but still checked); otherwise both must
    /// lie within [`MIN_SETTING`]..=[`MAX_SETTING`].
    ///
    /// Errors: [`ConnectionAgeError`] naming the flag and its range.
    pub fn new(max_age: Duration, grace: Duration) -> Result<Option<Self>, ConnectionAgeError> {
        let in_range = |d: Duration| (MIN_SETTING..=MAX_SETTING).contains(&d);
        if !in_range(grace) {
            return Err(ConnectionAgeError::Grace(grace));
        }
        if max_age.is_zero() {
            return Ok(None);
        }
        if !in_range(max_age) {
            return Err(ConnectionAgeError::MaxAge(max_age));
        }
        Ok(Some(Self { max_age, grace }))
    }

    /// The setting the ages are drawn around.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// How long the calls of an aged connection may still run.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// One connection's age: the setting moved by up to ±[`JITTER`], at
    /// `unit` (a uniform draw from `[0, 1)`; 0 gives −10%, 0.5 the setting,
    /// values towards 1 nearly +10%; values outside are clamped).
    pub fn jittered(&self, unit: f64) -> Duration {
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.5
        };
        // Within MAX_SETTING × 1.1, far from Duration's limit.
        self.max_age.mul_f64(1.0 - JITTER + 2.0 * JITTER * unit)
    }

    /// The shortest and longest ages [`jittered`](Self::jittered) gives.
    pub fn age_range(&self) -> (Duration, Duration) {
        (self.jittered(0.0), self.jittered(1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn zero_turns_ageing_off_and_the_bounds_are_checked() {
        assert_eq!(ConnectionAge::new(S(0), DEFAULT_GRACE), Ok(None));
        let on = ConnectionAge::new(S(1), S(1)).unwrap().unwrap();
        assert_eq!((on.max_age(), on.grace()), (S(1), S(1)));
        assert!(
            ConnectionAge::new(MAX_SETTING, MAX_SETTING)
                .unwrap()
                .is_some()
        );
        let short = Duration::from_millis(999);
        assert_eq!(
            ConnectionAge::new(short, S(5)),
            Err(ConnectionAgeError::MaxAge(short))
        );
        let long = MAX_SETTING + S(1);
        assert_eq!(
            ConnectionAge::new(long, S(5)),
            Err(ConnectionAgeError::MaxAge(long))
        );
        assert_eq!(
            ConnectionAge::new(S(60), short),
            Err(ConnectionAgeError::Grace(short))
        );
        assert_eq!(
            ConnectionAge::new(S(60), S(0)),
            Err(ConnectionAgeError::Grace(S(0)))
        );
        assert_eq!(
            ConnectionAge::new(S(60), long),
            Err(ConnectionAgeError::Grace(long))
        );
        // A bad grace is reported even with ageing off: the flag is wrong.
        assert!(ConnectionAge::new(S(0), S(0)).is_err());
        let e = ConnectionAge::new(short, S(5)).unwrap_err().to_string();
        assert!(
            e.contains("--max-connection-age") && e.contains("0 to turn"),
            "{e}"
        );
        let e = ConnectionAge::new(S(5), S(0)).unwrap_err().to_string();
        assert!(e.contains("--max-connection-age-grace"), "{e}");
    }

    #[test]
    fn ages_are_jittered_by_ten_percent_either_way() {
        let age = ConnectionAge::new(S(100), S(10)).unwrap().unwrap();
        assert_eq!(age.jittered(0.0), S(90));
        assert_eq!(age.jittered(0.5), S(100));
        assert_eq!(age.jittered(1.0), S(110));
        assert_eq!(age.age_range(), (S(90), S(110)));
        assert_eq!(age.jittered(-3.0), S(90));
        assert_eq!(age.jittered(7.0), S(110));
        assert_eq!(age.jittered(f64::NAN), S(100));
        let longest = ConnectionAge::new(MAX_SETTING, S(1)).unwrap().unwrap();
        assert_eq!(longest.jittered(1.0), MAX_SETTING.mul_f64(1.1));
    }

    #[test]
    fn the_defaults_are_within_the_bounds() {
        let d = ConnectionAge::default();
        assert_eq!(ConnectionAge::new(d.max_age(), d.grace()), Ok(Some(d)));
        assert_eq!((d.max_age(), d.grace()), (DEFAULT_MAX_AGE, DEFAULT_GRACE));
    }
}
