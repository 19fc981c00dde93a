//! Trace ingestion and attribution: files and directories in, one [`attribute::Attribution`] out.

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
