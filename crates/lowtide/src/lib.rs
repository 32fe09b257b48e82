//! lowtide
