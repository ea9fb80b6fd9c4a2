//! Starting a job: process spawning for `squall run`, and the join/hello rendezvous a node
//! performs at start (from environment variables, so any launcher can drive it).
#![forbid(unsafe_code)]
