//! The real driver on the simulated platform under paused tokio time.
