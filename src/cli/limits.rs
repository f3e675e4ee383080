//! Limit flags shared by `serve` and `wrapper-server`.

use std::time::Duration;

use clap::Args;

use crate::adapters::exec::FunctionSlots;
use crate::adapters::exec::slots::{DEFAULT_MAX_QUEUED, DEFAULT_START_LIMIT, default_max_running};
use crate::adapters::grpc::ServerLimits;

/// Bounds on function processes, requests and connections (not in Porch,
/// which has none).
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Most function processes running at once (default: 4 per core, at least 8).
    #[arg(long, default_value_t = default_max_running())]
    pub max_concurrent_functions: usize,
    /// Most calls waiting for a function slot; beyond: RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = DEFAULT_MAX_QUEUED)]
    pub max_queued_functions: usize,
    /// Most functions started within the last --function-start-grace at
    /// once; more wait in arrival order (0: off, the default; e.g. the
    /// number of CPUs).
    #[arg(long, env = "KRM_FN_START_LIMIT", default_value_t = DEFAULT_START_LIMIT)]
    pub function_start_limit: usize,
    /// How long a started function counts against --function-start-limit.
    #[arg(
        long,
        env = "KRM_FN_START_GRACE",
        value_parser = humantime::parse_duration,
        default_value = "25ms"
    )]
    pub function_start_grace: Duration,
    /// Most bytes of requests being evaluated at once; beyond: RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = ServerLimits::default().max_bytes_in_flight)]
    pub max_request_bytes_in_flight: usize,
    /// Most open client connections; more wait in the listen backlog.
    #[arg(long, default_value_t = ServerLimits::default().max_connections)]
    pub max_connections: usize,
    /// Most concurrent calls (HTTP/2 streams) per connection.
    #[arg(long, default_value_t = ServerLimits::default().max_concurrent_streams)]
    pub max_concurrent_streams: u32,
    /// Period of HTTP/2 keepalive pings to clients (0 disables them).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    pub keepalive_interval: Duration,
    /// How long a keepalive ping may go unanswered before the connection is closed.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub keepalive_timeout: Duration,
    /// Close a connection with no call in progress after this long (0 keeps them).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5m")]
    pub idle_timeout: Duration,
}

impl LimitArgs {
    /// The server's transport limits from these flags.
    pub fn server_limits(&self, max_message_bytes: usize) -> ServerLimits {
        let nonzero = |d: Duration| (!d.is_zero()).then_some(d);
        ServerLimits {
            max_connections: self.max_connections.max(1),
            max_concurrent_streams: self.max_concurrent_streams.max(1),
            keepalive_interval: nonzero(self.keepalive_interval),
            keepalive_timeout: self.keepalive_timeout,
            idle_timeout: nonzero(self.idle_timeout),
            // A request of the largest allowed size must always fit.
            max_bytes_in_flight: self.max_request_bytes_in_flight.max(max_message_bytes),
        }
    }

    /// The function slots from these flags.
    pub fn slots(&self) -> FunctionSlots {
        FunctionSlots::new(self.max_concurrent_functions, self.max_queued_functions)
            .with_start_limit(self.function_start_limit, self.function_start_grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::exec::slots::DEFAULT_START_GRACE;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        limits: LimitArgs,
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let t = T::parse_from(["t"]);
        assert_eq!(t.limits.server_limits(0), ServerLimits::default());
        assert_eq!(t.limits.function_start_grace, DEFAULT_START_GRACE);
        assert_eq!(t.limits.function_start_limit, DEFAULT_START_LIMIT);
    }
}
