//! Trace ingestion and attribution: files and directories in, one [`attribute::Attribution`] out.

// This crate reads files from pull requests: no index or slice that could panic on their contents
// (`get`, iterators and patterns instead), and no cast that silently truncates or wraps a size read
// from one (`try_from` with an error, or a saturating conversion in `narrow`). Tests are exempt from
// the first through clippy.toml.
#![deny(clippy::indexing_slicing)]
#![deny(clippy::cast_possible_truncation)]

pub mod attribute;
pub mod caveats;
pub mod classify;
pub mod critical;
pub mod events;
pub mod flat;
pub mod inspector;
pub mod intervals;
pub mod kineto;
pub mod limits;
pub mod load;
pub mod model;
mod narrow;
pub mod nsys;
pub mod partial;
pub mod reader;
pub mod scan;
