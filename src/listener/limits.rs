//! What one client connection may hold, from `listen:` and the open-file limit.

use std::time::Duration;

/// What one client connection may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time to send a request head, from the connection's start or the next request's first
    /// byte.
    pub request_head_timeout: Duration,
    /// Time a kept-alive connection may wait for its next request, and a request may go without
    /// moving a byte.
    pub idle_timeout: Duration,
    /// Time an answer may go without the client taking a byte of it.
    pub write_timeout: Duration,
    /// Largest request head (request line and headers); over it, 431.
    pub max_request_head_bytes: usize,
    /// Most connections held at once.
    pub max_connections: usize,
}

impl Limits {
    /// The limits `listen:` sets, with the connection cap for the open-file limit `fd_limit`.
    pub fn new(listen: &crate::config::Listen, fd_limit: Option<u64>) -> Limits {
        let (max_connections, _) =
            super::fds::effective_max_connections(listen.max_connections, fd_limit);
        Limits {
            request_head_timeout: listen.request_head_timeout,
            idle_timeout: listen.idle_timeout,
            write_timeout: listen.write_timeout,
            max_request_head_bytes: listen.max_request_head_bytes,
            max_connections,
        }
    }
}
