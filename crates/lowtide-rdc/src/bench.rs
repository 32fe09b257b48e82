//! The agent measured on real packets (filled in below).
