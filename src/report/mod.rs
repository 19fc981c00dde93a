//! Renderers: data in, `String` out. No file or network I/O here; the caller writes.
