//! Protocol tests in simulated time ([`crate::sim::Pair`]).

mod bulk_path;
mod dbat;
mod failover;
mod limits;
mod props;
mod reserve;
mod service;
mod structured;
mod transmit_work;
