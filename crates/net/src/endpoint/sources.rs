//! Extra sources: other file descriptors (the runtime's userfaultfd) in the service thread's
//! poll, under tokens from `SOURCE_TOKEN_BASE`, with a callback run on the service thread
//! when one becomes readable. Must not touch the backend's tokens or the handler table.
use super::Endpoint;
use crate::error::NetError;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// An extra source's readiness callback (shared like a handler, so the service thread runs it
/// without holding the source table's lock).
pub(super) type SourceFn = Arc<Mutex<dyn FnMut(&Endpoint) + Send + 'static>>;

/// An extra file descriptor the service thread polls (see [`Endpoint::add_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceId(usize);

impl Endpoint {
    /// Polls `fd` on the service thread beside the network: `on_ready` runs there (like a
    /// handler, one at a time with them) whenever `fd` becomes readable. Readiness is
    /// edge-triggered: the callback must consume everything available (read until
    /// `EWOULDBLOCK`), or it is not called again until new input arrives. If `fd` is readable
    /// already, the callback runs soon after registration. The caller keeps `fd` open until
    /// [`Endpoint::remove_source`] (or the end of the endpoint). Callable from any thread.
    pub fn add_source(
        &self,
        fd: RawFd,
        on_ready: impl FnMut(&Endpoint) + Send + 'static,
    ) -> Result<SourceId, NetError> {
        let token = self.shared.next_source.fetch_add(1, Ordering::Relaxed);
        let f: SourceFn = Arc::new(Mutex::new(on_ready));
        // In the table before the poll can report it.
        self.change_sources(|s| {
            s.insert(token, (fd, f));
        });
        if let Err(e) =
            self.shared
                .registry
                .register(&mut SourceFd(&fd), Token(token), Interest::READABLE)
        {
            self.change_sources(|s| {
                s.remove(&token);
            });
            return Err(NetError::io(
                format!("registering fd {fd} with the poll"),
                e,
            ));
        }
        Ok(SourceId(token))
    }

    /// Changes the table of extra sources under its lock and keeps its lock-free count.
    fn change_sources<R>(&self, f: impl FnOnce(&mut HashMap<usize, (RawFd, SourceFn)>) -> R) -> R {
        let mut sources = self.shared.sources.lock();
        let r = f(&mut sources);
        self.shared
            .sources_len
            .store(sources.len(), Ordering::Release);
        r
    }

    /// Stops polling a source added with [`Endpoint::add_source`] and drops its callback (a
    /// run in progress finishes). Returns false if it was not registered.
    pub fn remove_source(&self, id: SourceId) -> bool {
        let Some((fd, _)) = self.change_sources(|s| s.remove(&id.0)) else {
            return false;
        };
        // The fd may be closed already (which removed it from the poll): nothing to undo then.
        let _ = self.shared.registry.deregister(&mut SourceFd(&fd));
        true
    }
}
