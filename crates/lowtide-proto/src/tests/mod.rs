//! Protocol tests in simulated time ([`crate::sim::Pair`]).

mod dbat;
mod limits;
mod props;
mod service;
mod structured;
