//! The communication backbone: handlers by message type run on the node's service thread,
//! one-way sends, request/reply, bulk transfer; backends in `backend/`.
#![forbid(unsafe_code)]
