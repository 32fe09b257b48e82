//! Protocol tests in simulated time ([`crate::sim::Pair`]).

mod limits;
mod props;
mod service;
mod structured;
