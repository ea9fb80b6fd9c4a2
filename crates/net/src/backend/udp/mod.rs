//! The udp backend: the sans-IO reliable-datagram core (`core`) plus a thin socket driver.
pub mod core;
use super::Backend;
use crate::config::NetConfig;
use crate::error::NetError;
use squall_core::JobId;
use std::net::{SocketAddr, UdpSocket};

pub(crate) struct UdpBackend;

impl UdpBackend {
    pub(crate) fn new(
        _cfg: &NetConfig,
        _job: JobId,
        _sock: UdpSocket,
        _table: Vec<SocketAddr>,
    ) -> Result<Box<dyn Backend>, NetError> {
        Err(NetError::Config(
            "udp backend: not in this build yet".into(),
        ))
    }
}
