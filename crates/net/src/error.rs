//! The one error type of the communication layer. Owns error wording only.
use squall_core::NodeId;
use squall_wire::MsgType;

/// Errors of `squall-net`. Messages are lowercase and name the nodes involved.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{0}")]
    Config(String),
    #[error("bootstrap failed: {0}")]
    Bootstrap(String),
    #[error("lost contact with {peer} ({reason})")]
    PeerLost { peer: NodeId, reason: String },
    #[error("{peer} has left the job (said goodbye)")]
    PeerGone { peer: NodeId },
    #[error("no such node: {peer} (job size {size})")]
    BadDestination { peer: NodeId, size: u16 },
    #[error("{ty} is reserved for the transport (types below 64)")]
    ReservedType { ty: MsgType },
    #[error(
        "a blocking request to {peer} was made on the service thread; use request_async there"
    )]
    WouldDeadlock { peer: NodeId },
    #[error("cannot reply: the message from {src} ({ty}) is not a request")]
    NotARequest { src: NodeId, ty: MsgType },
    #[error("message of {len} bytes is too large for the transport")]
    TooLarge { len: usize },
    #[error("the endpoint is shut down")]
    Shutdown,
    #[error("i/o error on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl NetError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> NetError {
        NetError::Io {
            what: what.into(),
            source,
        }
    }
}
